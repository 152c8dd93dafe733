/* libFuzzer target: the packet header decoder, which every received
 * datagram meets first (transport/pkthdr.c). Input: the receiving
 * session's payload per packet (2 bytes), then the packet. A header it
 * accepts must encode back to the same bytes and promise no more payload
 * than the packet holds. */
#include "autoconfig.h"

#include <stdlib.h>
#include <string.h>

#include "transport/pkthdr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	uint32_t dpp = (uint32_t)data[0] | (uint32_t)data[1] << 8;
	const uint8_t *pkt = data + 2;
	size_t len = size - 2;
	struct pkt_info info;
	if (pkthdr_decode(pkt, len, dpp, &info) != PKT_OK)
		return 0;
	struct pkthdr again;
	pkthdr_encode(&again, &info);
	if (memcmp(&again, pkt, PKTHDR_SIZE) != 0)
		abort(); /* accepted bytes the decoded fields do not say */
	uint32_t payload = pkt_data_len(info.msg_size, dpp, info.pkt_num);
	if (info.type != PKT_REQ && info.type != PKT_RESP)
		payload = 0;
	if (PKTHDR_SIZE + (size_t)payload != len)
		abort(); /* the payload the header promises is not what came */
	return 0;
}
