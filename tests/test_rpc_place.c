/*
 * A placer takes a multi-packet request's bytes packet by packet, where the
 * handler would copy them on from a reassembled msgbuf (the stream's receive
 * ring): each piece once, in order, at its offset, with the request's header
 * beside it; the handler then sees that the bytes went and what the placer
 * said. One-packet requests go to the handler whole, as before. A lost
 * packet (go-back-N) and a refused piece behave as the transport promises.
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "tests/rpc_pair.h"
#include "transport/nic_test.h"

#define REQ_PUT 1
#define HEAD 16u
#define TURNS 20000

static struct rpc_pair pair;
static uint8_t placed[64 * 1024];
static uint32_t next_off, pieces, head_mismatch, refuse_at;
static unsigned handled, completed;
static bool saw_placed;
static int saw_status;
static uint32_t saw_size, saw_msg_size;
static uint8_t sent_head[HEAD];

static int place(struct rpc *rpc, int session, const uint8_t *head, uint32_t off,
		 const uint8_t *data, uint32_t len, void *ctx)
{
	(void)rpc;
	(void)ctx;
	cr_assert_eq(session, pair.sb);
	cr_assert_eq(off, next_off, "piece at %u, expected %u (in order, each once)", off, next_off);
	cr_assert_leq(off + len, sizeof(placed));
	if (memcmp(head, sent_head, HEAD) != 0)
		head_mismatch++;
	memcpy(placed + off, data, len);
	next_off = off + len;
	pieces++;
	return pieces == refuse_at ? -ENOSPC : 0;
}

static void handle(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	(void)ctx;
	handled++;
	saw_placed = rpc_req_placed(req, &saw_status);
	saw_size = rpc_req_size(req);
	const struct msgbuf *m = rpc_req_msg(req);
	saw_msg_size = m->data_size;
	if (!saw_placed)
		memcpy(placed, m->buf, m->data_size);
	rpc_resp_msg(rpc, req, 0);
	rpc_respond(rpc, req);
}

static void done(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	(void)resp;
	cr_assert_eq(status, 0);
	rpc_free_msg(rpc, tag);
	completed++;
}

static void start(void)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	cfg.rto_us = 10000000;
	char why[256];
	cr_assert_eq(rpc_pair_open(&pair, "test", &cfg, why, sizeof(why)), 0, "%s", why);
	rpc_lock(pair.a);
	rpc_lock(pair.b);
	cr_assert_eq(rpc_register_handler(pair.b, REQ_PUT, handle, NULL), 0);
	cr_assert_eq(rpc_register_placer(pair.b, REQ_PUT, place, HEAD), 0);
	memset(placed, 0, sizeof(placed));
	next_off = pieces = head_mismatch = refuse_at = 0;
	handled = completed = 0;
}

static void stop(void)
{
	rpc_unlock(pair.a);
	rpc_unlock(pair.b);
	rpc_pair_close(&pair);
}

TestSuite(place, .init = start, .fini = stop, .timeout = 60);

static struct msgbuf *send_bytes(uint32_t size)
{
	struct msgbuf *m = rpc_alloc_msg(pair.a, size);
	cr_assert_not_null(m);
	for (uint32_t i = 0; i < size; i++)
		m->buf[i] = (uint8_t)(i * 7 + i / 251);
	memcpy(sent_head, m->buf, HEAD);
	cr_assert_eq(rpc_enqueue_request(pair.a, pair.sa, REQ_PUT, m, done, m), 0);
	return m;
}

static void turns(void)
{
	for (unsigned i = 0; i < TURNS && completed == 0; i++) {
		rpc_run_once(pair.a);
		rpc_run_once(pair.b);
	}
	cr_assert_eq(completed, 1);
	cr_assert_eq(handled, 1, "the handler runs once, at the end");
}

static void expect_bytes(uint32_t size)
{
	for (uint32_t i = 0; i < size; i++)
		cr_assert_eq(placed[i], (uint8_t)(i * 7 + i / 251), "byte %u", i);
}

Test(place, a_multi_packet_request_is_placed_piece_by_piece)
{
	uint32_t dpp = rpc_max_pkt_data(pair.a);
	uint32_t size = 5 * dpp + 100;
	send_bytes(size);
	turns();
	cr_assert_eq(pieces, 6, "%u pieces for 6 packets", pieces);
	cr_assert_eq(next_off, size);
	cr_assert_eq(head_mismatch, 0, "every piece sees the request's header");
	expect_bytes(size);
	cr_assert(saw_placed);
	cr_assert_eq(saw_status, 0);
	cr_assert_eq(saw_size, size);
	cr_assert_eq(saw_msg_size, HEAD, "the handler's msgbuf is the header alone");
}

Test(place, a_one_packet_request_goes_to_the_handler_whole)
{
	uint32_t size = rpc_max_pkt_data(pair.a);
	send_bytes(size);
	turns();
	cr_assert_eq(pieces, 0);
	cr_assert_not(saw_placed);
	cr_assert_eq(saw_msg_size, size);
	expect_bytes(size);
}

Test(place, a_lost_packet_is_placed_once_after_go_back)
{
	uint32_t dpp = rpc_max_pkt_data(pair.a);
	uint32_t size = 10 * dpp;
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(pair.b), 4), 0); /* request packet 3 */
	send_bytes(size);
	turns();
	cr_assert_gt(pair.st_a.retransmits, 0, "the loss happened");
	cr_assert_eq(pieces, 10, "%u pieces: the ones before the loss are not offered again",
		     pieces);
	expect_bytes(size);
	cr_assert_eq(saw_status, 0);
}

Test(place, a_refused_piece_stops_the_offers_and_reaches_the_handler)
{
	uint32_t dpp = rpc_max_pkt_data(pair.a);
	refuse_at = 2;
	send_bytes(6 * dpp);
	turns();
	cr_assert_eq(pieces, 2, "no piece is offered after the refusal");
	cr_assert(saw_placed);
	cr_assert_eq(saw_status, -ENOSPC);
}

Test(place, a_placer_needs_a_handler_and_a_small_header)
{
	cr_assert_eq(rpc_register_placer(pair.b, 2, place, HEAD), -EINVAL, "no handler for 2");
	cr_assert_eq(rpc_register_placer(pair.b, REQ_PUT, place, RPC_PLACE_HEAD_MAX + 1), -EINVAL);
}
