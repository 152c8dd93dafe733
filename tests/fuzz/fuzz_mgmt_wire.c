/* libFuzzer target: the management channel's decoder (mgmt/mgmt_wire.c),
 * which reads every datagram on a control or rendezvous socket. A message
 * it accepts must encode back to the very bytes it came as: nothing on the
 * wire goes unchecked or unsaid. */
#include "autoconfig.h"

#include <stdlib.h>
#include <string.h>

#include "mgmt/mgmt_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mgmt_msg msg;
	if (mgmt_wire_decode(data, size, &msg) < 0)
		return 0;
	uint8_t again[MGMT_WIRE_MAX_SIZE];
	size_t n = mgmt_wire_encode(&msg, again);
	if (n != size || memcmp(again, data, size) != 0)
		abort();
	return 0;
}
