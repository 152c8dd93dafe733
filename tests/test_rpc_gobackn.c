/*
 * Go-back-N on chosen losses (test nic, deterministic): a lost request
 * packet is recovered through the responder's NACK, a lost response packet
 * through the requester's gap detection, both without waiting for the
 * retransmission timeout; a lost credit return is made up by the next (they
 * are cumulative, one per pass or per RPC_CR_EVERY packets); a lost last
 * packet, which leaves no gap to see, waits for the timeout. Requests to a
 * peer whose endpoint is gone (udp: its port refuses) keep the endpoint busy
 * but not waiting on a live peer, so an exit does not wait for them.
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

#include "tests/rpc_pair.h"
#include "transport/nic_test.h"
#include "transport/nic_udp.h"

#define REQ_ECHO 1
/* Loop turns that take milliseconds: far less than the 10 s timeout. */
#define TURNS 20000

static unsigned executed, completed;
static int status_seen;

static void echo(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	(void)ctx;
	const struct msgbuf *in = rpc_req_msg(req);
	struct msgbuf *out = rpc_resp_msg(rpc, req, in->data_size);
	memcpy(out->buf, in->buf, in->data_size);
	executed++;
	rpc_respond(rpc, req);
}

static void done(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct msgbuf *req = tag;
	status_seen = status;
	if (status == 0)
		cr_assert_eq(memcmp(resp->buf, req->buf, req->data_size), 0);
	rpc_free_msg(rpc, req);
	completed++;
}

static struct rpc_pair pair;

static void open_pair_rto(const char *transport, unsigned credits, unsigned rto_us)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	cfg.rto_us = rto_us;
	cfg.session_credits = credits;
	char why[256];
	cr_assert_eq(rpc_pair_open(&pair, transport, &cfg, why, sizeof(why)), 0, "%s", why);
	rpc_lock(pair.a);
	rpc_lock(pair.b);
	cr_assert_eq(rpc_register_handler(pair.b, REQ_ECHO, echo, NULL), 0);
	executed = completed = 0;
}

/* A timeout that never comes within a test, unless it asks for one. */
static void open_pair_on(const char *transport, unsigned credits)
{
	open_pair_rto(transport, credits, 10000000);
}

static void open_pair(unsigned credits) { open_pair_on("test", credits); }

static void start(void) { open_pair(0); }

static void stop(void)
{
	rpc_unlock(pair.a);
	if (pair.b)
		rpc_unlock(pair.b);
	rpc_pair_close(&pair);
}

/* The pair again, with this many credits per session (32: A sends a
 * 32-packet request in one pass, and B takes it in one). */
static void reopen(unsigned credits)
{
	stop();
	open_pair(credits);
}

static void send_packets(uint32_t npkts)
{
	uint32_t size = npkts * rpc_max_pkt_data(pair.a);
	struct msgbuf *m = rpc_alloc_msg(pair.a, size);
	for (uint32_t i = 0; i < size; i++)
		m->buf[i] = (uint8_t)(i * 13);
	cr_assert_eq(rpc_enqueue_request(pair.a, pair.sa, REQ_ECHO, m, done, m), 0);
}

static void turns(unsigned n)
{
	for (unsigned i = 0; i < n && completed == 0; i++) {
		rpc_run_once(pair.a);
		rpc_run_once(pair.b);
	}
}

TestSuite(gobackn, .init = start, .fini = stop, .timeout = 60);

Test(gobackn, lost_request_packet_recovered_by_nack)
{
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(pair.b), 4), 0); /* request packet 3 */
	send_packets(10);
	turns(TURNS);
	cr_assert_eq(completed, 1, "recovery waited for the timeout");
	cr_assert_eq(status_seen, 0);
	cr_assert_eq(executed, 1);
	cr_assert_gt(pair.st_a.retransmits, 0);
}

Test(gobackn, a_pass_answers_its_request_packets_with_few_credit_returns)
{
	reopen(32);
	send_packets(32);
	turns(TURNS);
	cr_assert_eq(completed, 1);
	/* Credit returns for packets 7, 15 and 23, then the response (32
	 * packets) answers the rest: one credit return per packet would be
	 * 31. */
	cr_assert_eq(pair.st_a.pkts_rx, 32 + 3, "%llu packets came back",
		     (unsigned long long)pair.st_a.pkts_rx);
	cr_assert_eq(pair.st_a.retransmits, 0);
}

Test(gobackn, a_lost_credit_return_is_made_up_by_the_next)
{
	reopen(32);
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(pair.a), 1), 0); /* the one for packet 7 */
	send_packets(32);
	turns(TURNS);
	cr_assert_eq(completed, 1, "recovery waited for the timeout");
	cr_assert_eq(executed, 1);
	cr_assert_eq(pair.st_a.retransmits, 0, "the next credit return answers packet 7 too");
}

Test(gobackn, a_nack_answers_the_packets_before_it)
{
	reopen(32);
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(pair.b), 4), 0); /* request packet 3 */
	send_packets(32);
	turns(TURNS);
	cr_assert_eq(completed, 1, "recovery waited for the timeout");
	cr_assert_eq(executed, 1);
	/* The NACK names packet 3, whose credit return had not left yet:
	 * packets 0-2 are not sent again. */
	cr_assert_eq(pair.st_a.retransmits, 32 - 3, "%llu packets sent again",
		     (unsigned long long)pair.st_a.retransmits);
}

/* B takes packets 0, 1 and 3 of 8 (2 is lost) only after A's timeout has
 * gone back and sent packet 0 again as its probe: B's NACK for 2, late now,
 * answers everything A had out, and A must send 2 on its word (the probe's
 * credit return is a duplicate by then, and nothing is left to time out). */
Test(gobackn, a_nack_that_comes_after_a_timeout_still_gets_its_packet)
{
	reopen(32);
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(pair.b), 3), 0); /* request packet 2 */
	send_packets(8);
	pair.cfg_a.rto_us = 1000;
	for (unsigned i = 0; i < 100000000 && pair.st_a.retransmits == 0; i++) /* hang guard */
		rpc_run_once(pair.a);
	cr_assert_eq(pair.st_a.retransmits, 1, "the timeout probes with one packet");
	pair.cfg_a.rto_us = 10000000;
	turns(TURNS);
	cr_assert_eq(completed, 1, "the late NACK's packet was never sent");
	cr_assert_eq(executed, 1);
}

Test(gobackn, lost_response_packet_recovered_by_gap)
{
	/* The four request packets come in one pass, so the response answers
	 * them: response packet 0, then 1, 2, 3...: lose response 1. */
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(pair.a), 2), 0);
	send_packets(4);
	turns(TURNS);
	cr_assert_eq(completed, 1, "recovery waited for the timeout");
	cr_assert_eq(executed, 1, "an RFR must not run the request again");
	cr_assert_gt(pair.st_a.retransmits, 0);
}

Test(gobackn, lost_last_packet_needs_the_timeout)
{
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(pair.b), 10), 0); /* the last of 10 */
	send_packets(10);
	turns(TURNS);
	cr_assert_eq(completed, 0, "nothing reveals a lost last packet but the timeout");
	cr_assert_eq(executed, 0);
	pair.cfg_a.rto_us = 1000;
	for (unsigned i = 0; i < 100000000 && completed == 0; i++) { /* hang guard */
		rpc_run_once(pair.a);
		rpc_run_once(pair.b);
	}
	cr_assert_eq(completed, 1);
	cr_assert_eq(executed, 1);
}

Test(gobackn, duplicate_last_packet_answered_from_saved_response)
{
	/* The response to a 1-packet request is lost: the timeout resends the
	 * request, which must be answered again without running twice. */
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(pair.a), 1), 0);
	send_packets(1);
	turns(TURNS);
	cr_assert_eq(completed, 0);
	cr_assert_eq(executed, 1);
	pair.cfg_a.rto_us = 1000;
	for (unsigned i = 0; i < 100000000 && completed == 0; i++) {
		rpc_run_once(pair.a);
		rpc_run_once(pair.b);
	}
	cr_assert_eq(completed, 1);
	cr_assert_eq(executed, 1, "at most once");
	cr_assert_geq(pair.st_b.retransmits, 1, "the saved response was sent again");
}

/* B's endpoint goes away (its process exited): the kernel refuses A's next
 * datagrams to its port, and what A has in flight to B will never be
 * answered. A stays busy (its timers run on) but waits on no live peer. */
Test(gobackn, requests_to_a_peer_whose_port_is_gone_wait_on_no_live_peer)
{
	stop();
	open_pair_on("udp", 0);
	send_packets(1);
	cr_assert(rpc_busy_with_live_peers(pair.a), "a request to a live peer is waited on");
	turns(TURNS);
	cr_assert_eq(completed, 1, "the pair does not work");
	/* Enough datagrams for a loopback peer's own socket, the one that
	 * hears of the refusal (NIC_UDP_PEER_LAZY). */
	for (unsigned i = 1; i < NIC_UDP_PEER_LAZY; i++) {
		completed = 0;
		send_packets(1);
		turns(TURNS);
		cr_assert_eq(completed, 1, "request %u was not answered", i);
	}
	cr_assert_not(rpc_session_peer_gone(pair.a, pair.sa));

	rpc_unlock(pair.b);
	rpc_destroy(pair.b);
	pair.b = NULL;
	/* The first datagram to the closed port draws the refusal, a later
	 * send on the same socket reports it. */
	for (int i = 0; i < 200 && !rpc_session_peer_gone(pair.a, pair.sa); i++) {
		send_packets(1);
		rpc_run_once(pair.a);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	cr_assert(rpc_session_peer_gone(pair.a, pair.sa), "the refused port was not seen");
	cr_assert(rpc_busy(pair.a), "requests in flight were dropped");
	cr_assert_not(rpc_busy_with_live_peers(pair.a), "requests to a gone peer are waited on");
}

/* The same for a peer that had barely spoken, so still sends from the nic's
 * socket, which hears of no refusal: its first timeout gives it a socket of
 * its own (nic_peer_unanswered), and the retransmission learns. */
Test(gobackn, a_young_peer_whose_port_is_gone_is_found_out_at_its_timeout)
{
	stop();
	open_pair_rto("udp", 0, 2000);
	send_packets(1);
	turns(TURNS);
	cr_assert_eq(completed, 1, "the pair does not work");

	rpc_unlock(pair.b);
	rpc_destroy(pair.b);
	pair.b = NULL;
	send_packets(1);
	for (int i = 0; i < 2000 && !rpc_session_peer_gone(pair.a, pair.sa); i++) {
		rpc_run_once(pair.a);
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	cr_assert(rpc_session_peer_gone(pair.a, pair.sa), "the refused port was not seen");
	cr_assert_geq(pair.st_a.retransmits, 1, "found out without a timeout");
}
