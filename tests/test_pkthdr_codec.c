/* Packet header: encode/decode round trip and every refusal reason. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <string.h>

#include "transport/pkthdr.h"

static const uint32_t dpp = 1000;

static size_t build(uint8_t *pkt, struct pkt_info *in)
{
	pkthdr_encode((struct pkthdr *)(void *)pkt, in);
	size_t len = PKTHDR_SIZE;
	if (in->type == PKT_REQ || in->type == PKT_RESP)
		len += pkt_data_len(in->msg_size, dpp, in->pkt_num);
	return len;
}

Test(pkthdr, round_trip_keeps_every_field)
{
	uint8_t pkt[2048] = {0};
	struct pkt_info in = {.type = PKT_RESP, .req_type = 7, .dest_session = 0xBEEF,
			      .pkt_num = 2, .msg_size = 2500, .req_num = 0x123456789ull,
			      .token = 0xDEADBEEFCAFEF00Dull};
	size_t len = build(pkt, &in);
	cr_assert_eq(len, PKTHDR_SIZE + 500);
	struct pkt_info out;
	cr_assert_eq(pkthdr_decode(pkt, len, dpp, &out), PKT_OK);
	cr_assert_eq(out.type, PKT_RESP);
	cr_assert_eq(out.req_type, 7);
	cr_assert_eq(out.dest_session, 0xBEEF);
	cr_assert_eq(out.pkt_num, 2);
	cr_assert_eq(out.msg_size, 2500);
	cr_assert_eq(out.req_num, 0x123456789ull);
	cr_assert_eq(out.token, 0xDEADBEEFCAFEF00Dull);
}

Test(pkthdr, wire_is_little_endian)
{
	uint8_t pkt[64] = {0};
	struct pkt_info in = {.type = PKT_CR, .dest_session = 0x0102, .msg_size = 10};
	build(pkt, &in);
	cr_assert_eq(pkt[0], PKTHDR_MAGIC);
	cr_assert_eq(pkt[4], 0x02);
	cr_assert_eq(pkt[5], 0x01);
}

Test(pkthdr, refuses_short_magic_type_flags)
{
	uint8_t pkt[64] = {0};
	struct pkt_info in = {.type = PKT_RFR, .msg_size = 3000, .pkt_num = 1}, out;
	size_t len = build(pkt, &in);
	cr_assert_eq(pkthdr_decode(pkt, len, dpp, &out), PKT_OK);
	cr_assert_eq(pkthdr_decode(pkt, PKTHDR_SIZE - 1, dpp, &out), PKT_ERR_SHORT);
	pkt[0] ^= 1;
	cr_assert_eq(pkthdr_decode(pkt, len, dpp, &out), PKT_ERR_MAGIC);
	pkt[0] ^= 1;
	pkt[12] = 1; /* reserved */
	cr_assert_eq(pkthdr_decode(pkt, len, dpp, &out), PKT_ERR_MAGIC);
	pkt[12] = 0;
	pkt[1] = 9;
	cr_assert_eq(pkthdr_decode(pkt, len, dpp, &out), PKT_ERR_TYPE);
	pkt[1] = PKT_RFR;
	pkt[3] = PKT_FLAG_NACK; /* NACK only rides on credit returns */
	cr_assert_eq(pkthdr_decode(pkt, len, dpp, &out), PKT_ERR_TYPE);
	pkt[3] = 0x80;
	cr_assert_eq(pkthdr_decode(pkt, len, dpp, &out), PKT_ERR_TYPE);
}

Test(pkthdr, refuses_sizes_that_disagree)
{
	uint8_t pkt[2048] = {0};
	struct pkt_info in = {.type = PKT_REQ, .msg_size = 1500, .pkt_num = 1}, out;
	size_t len = build(pkt, &in);
	cr_assert_eq(len, PKTHDR_SIZE + 500);
	cr_assert_eq(pkthdr_decode(pkt, len, dpp, &out), PKT_OK);
	cr_assert_eq(pkthdr_decode(pkt, len + 1, dpp, &out), PKT_ERR_SIZE);
	cr_assert_eq(pkthdr_decode(pkt, len - 1, dpp, &out), PKT_ERR_SIZE);
	in.pkt_num = 2; /* past the last packet */
	build(pkt, &in);
	cr_assert_eq(pkthdr_decode(pkt, PKTHDR_SIZE, dpp, &out), PKT_ERR_SIZE);
	in.pkt_num = 0;
	in.msg_size = RPC_MAX_MSG_SIZE + 1;
	build(pkt, &in);
	cr_assert_eq(pkthdr_decode(pkt, PKTHDR_SIZE + dpp, dpp, &out), PKT_ERR_SIZE);
}

Test(pkthdr, zero_byte_message_is_one_header_only_packet)
{
	uint8_t pkt[64] = {0};
	struct pkt_info in = {.type = PKT_REQ, .msg_size = 0}, out;
	size_t len = build(pkt, &in);
	cr_assert_eq(len, PKTHDR_SIZE);
	cr_assert_eq(pkt_count(0, dpp), 1);
	cr_assert_eq(pkthdr_decode(pkt, len, dpp, &out), PKT_OK);
}
