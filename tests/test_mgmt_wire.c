/* Management messages: round trips and every refusal. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "mgmt/mgmt_wire.h"

static struct mgmt_msg resp(void)
{
	struct mgmt_msg m = {.type = MGMT_CONNECT_RESP, .token = 0x0102030405060708ull,
			     .uuid = 0xF0E0D0C0B0A09080ull, .status = 0, .session = 0xBEEF,
			     .data_per_pkt = 8000};
	m.route.kind = 1;
	m.route.len = 11;
	for (int i = 0; i < 11; i++)
		m.route.data[i] = (uint8_t)(i + 1);
	m.proc = (struct mgmt_proc){.host = 0x1122334455667788ull, .pid = 4321, .start = 987654321};
	return m;
}

Test(mgmt_wire, round_trip_keeps_every_field)
{
	struct mgmt_msg in = resp(), out;
	uint8_t buf[MGMT_WIRE_MAX_SIZE];
	size_t len = mgmt_wire_encode(&in, buf);
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), 0);
	cr_assert_eq(out.type, MGMT_CONNECT_RESP);
	cr_assert_eq(out.token, in.token);
	cr_assert_eq(out.uuid, in.uuid);
	cr_assert_eq(out.session, 0xBEEF);
	cr_assert_eq(out.data_per_pkt, 8000);
	cr_assert_eq(memcmp(&out.route, &in.route, sizeof(in.route)), 0);
	cr_assert(out.proc.host == in.proc.host && out.proc.pid == 4321 && out.proc.start == 987654321);

	in.type = MGMT_CONNECT_REQ;
	len = mgmt_wire_encode(&in, buf);
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), 0);
	cr_assert_eq(out.type, MGMT_CONNECT_REQ);
	cr_assert_eq(out.session, 0xBEEF);
	cr_assert_eq(out.route.len, 11);
	cr_assert(out.proc.host == in.proc.host && out.proc.pid == 4321 && out.proc.start == 987654321);
	buf[len - 12] = 1; /* the proc block's zero word */
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), -EBADMSG);

	struct mgmt_msg bye = {.type = MGMT_DISCONNECT, .token = 9, .uuid = 42, .to = 0x0102030405060708ull};
	len = mgmt_wire_encode(&bye, buf);
	cr_assert_eq(len, MGMT_WIRE_HDR_SIZE + 8);
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), 0);
	cr_assert_eq(out.type, MGMT_DISCONNECT);
	cr_assert_eq(out.to, bye.to, "a goodbye names the process it is for");

	struct mgmt_msg offer = {.type = MGMT_OFFER, .token = 77, .uuid = 42, .pid = 1234,
				 .sid = 0x80000001u, .peer_sid = 5};
	len = mgmt_wire_encode(&offer, buf);
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), 0);
	cr_assert_eq(out.type, MGMT_OFFER);
	cr_assert(out.pid == 1234 && out.sid == 0x80000001u && out.peer_sid == 5 && out.token == 77,
		  "an offer names the process, the stream and its session's token");
	buf[len - 1] = 1; /* the zero word */
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), -EBADMSG);
	offer.pid = 0;
	len = mgmt_wire_encode(&offer, buf);
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), -EBADMSG, "an offer from no process");

	struct mgmt_msg ping = {.type = MGMT_PING, .uuid = 42};
	len = mgmt_wire_encode(&ping, buf);
	cr_assert_eq(len, MGMT_WIRE_HDR_SIZE);
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), 0);
	cr_assert_eq(out.uuid, 42);
}

Test(mgmt_wire, magic_differs_from_the_datapath)
{
	struct mgmt_msg in = resp();
	uint8_t buf[MGMT_WIRE_MAX_SIZE];
	mgmt_wire_encode(&in, buf);
	cr_assert_neq(buf[0], 0xF5);
	cr_assert_eq(buf[8], 0x08); /* little-endian token */
}

Test(mgmt_wire, refuses_what_does_not_fit)
{
	struct mgmt_msg in = resp(), out;
	uint8_t buf[MGMT_WIRE_MAX_SIZE + 8];
	size_t len = mgmt_wire_encode(&in, buf);
	cr_assert_eq(mgmt_wire_decode(buf, len - 1, &out), -EBADMSG);
	cr_assert_eq(mgmt_wire_decode(buf, len + 1, &out), -EBADMSG);
	cr_assert_eq(mgmt_wire_decode(buf, 3, &out), -EBADMSG);
	for (size_t off = 0; off < 8; off++) { /* magic, version, type, length */
		if (off == 4 || off == 5 || off < 4 || off == 6) {
			buf[off] ^= 0x40;
			cr_assert_eq(mgmt_wire_decode(buf, len, &out), -EBADMSG, "byte %zu", off);
			buf[off] ^= 0x40;
		}
	}
	buf[MGMT_WIRE_HDR_SIZE + 6] = 1; /* padding */
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), -EBADMSG);
	buf[MGMT_WIRE_HDR_SIZE + 6] = 0;
	buf[MGMT_WIRE_HDR_SIZE + 12 + 1] = NIC_ROUTE_BYTES + 1; /* route length */
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), -EBADMSG);
	buf[MGMT_WIRE_HDR_SIZE + 12 + 1] = 11;
	buf[MGMT_WIRE_HDR_SIZE + 12 + 2 + 11] = 1; /* past the route's length (found by fuzzing) */
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), -EBADMSG);
	buf[MGMT_WIRE_HDR_SIZE + 12 + 2 + 11] = 0;
	buf[MGMT_WIRE_HDR_SIZE + 3] = 0x80; /* negative status */
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), -EBADMSG);
	buf[MGMT_WIRE_HDR_SIZE + 3] = 0;
	cr_assert_eq(mgmt_wire_decode(buf, len, &out), 0);
}
