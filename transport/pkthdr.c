/* Packet header encoding and validation. */
#include "autoconfig.h"

#include "transport/pkthdr.h"

#include <endian.h>
#include <string.h>

void pkthdr_encode(struct pkthdr *w, const struct pkt_info *in)
{
	w->magic = PKTHDR_MAGIC;
	w->pkt_type = (uint8_t)in->type;
	w->req_type = in->req_type;
	w->flags = in->flags;
	w->dest_session = htole16(in->dest_session);
	w->pkt_num = htole16(in->pkt_num);
	w->msg_size = htole32(in->msg_size);
	w->reserved = 0;
	w->req_num = htole64(in->req_num);
	w->token = htole64(in->token);
}

enum pkt_error pkthdr_decode(const void *pkt, size_t len, uint32_t dpp, struct pkt_info *out)
{
	struct pkthdr w;
	if (len < PKTHDR_SIZE)
		return PKT_ERR_SHORT;
	memcpy(&w, pkt, sizeof(w)); /* the receive buffer may be unaligned */
	if (w.magic != PKTHDR_MAGIC || w.reserved != 0)
		return PKT_ERR_MAGIC;
	if (w.pkt_type > PKT_RFR || (w.flags & ~PKT_FLAGS_KNOWN))
		return PKT_ERR_TYPE;
	out->type = (enum pkt_type)w.pkt_type;
	out->req_type = w.req_type;
	out->flags = w.flags;
	out->dest_session = le16toh(w.dest_session);
	out->pkt_num = le16toh(w.pkt_num);
	out->msg_size = le32toh(w.msg_size);
	out->req_num = le64toh(w.req_num);
	out->token = le64toh(w.token);
	if (out->flags && out->type != PKT_CR)
		return PKT_ERR_TYPE;
	if (out->msg_size > RPC_MAX_MSG_SIZE || dpp == 0)
		return PKT_ERR_SIZE;
	uint32_t npkts = pkt_count(out->msg_size, dpp);
	if (out->pkt_num >= npkts)
		return PKT_ERR_SIZE;
	size_t expect = PKTHDR_SIZE;
	if (out->type == PKT_REQ || out->type == PKT_RESP)
		expect += pkt_data_len(out->msg_size, dpp, out->pkt_num);
	if (len != expect)
		return PKT_ERR_SIZE;
	return PKT_OK;
}
