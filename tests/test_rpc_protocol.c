/*
 * The RPC protocol end to end between two endpoints, on every datapath
 * (parametrised): single- and multi-packet messages, backlog and credit
 * exhaustion, loss/duplication/reordering with exactly-once execution,
 * deferred responses, session reset, and hostile packets.
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tests/rpc_pair.h"
#include "transport/nic.h"
#include "transport/nic_test.h"
#include "transport/pkthdr.h"

#define REQ_ECHO 1
#define REQ_DEFER 2
#define MAX_REQS 4096

struct transport_param {
	char name[16];
};
/* Every datapath this build has (softib needs libibverbs). */
#ifdef HAVE_VERBS
#define TRANSPORT_PARAMS {{"test"}, {"udp"}, {"softib"}}
#else
#define TRANSPORT_PARAMS {{"test"}, {"udp"}}
#endif

struct harness {
	struct rpc_pair p;
	unsigned executed[MAX_REQS]; /* per request id, on the server */
	unsigned completed;          /* continuations run */
	unsigned failed;             /* continuations with an error */
	int last_err;
	unsigned verify_errors;
	struct rpc_req *deferred[64];
	unsigned n_deferred;
};

struct pending {
	struct harness *h;
	struct msgbuf *req;
	uint32_t size;
	uint32_t id;
};

static uint8_t pattern(uint32_t id, uint32_t i) { return (uint8_t)(id * 131u + i * 7u + (i >> 8)); }

static void fill(struct msgbuf *m, uint32_t id)
{
	for (uint32_t i = 0; i < m->data_size; i++)
		m->buf[i] = pattern(id, i);
	if (m->data_size >= 4)
		memcpy(m->buf, &id, 4);
}

static bool check(const struct msgbuf *m, uint32_t size, uint32_t id)
{
	if (m->data_size != size)
		return false;
	for (uint32_t i = 4; i < size; i++)
		if (m->buf[i] != pattern(id, i))
			return false;
	uint32_t got;
	if (size >= 4 && (memcpy(&got, m->buf, 4), got != id))
		return false;
	return true;
}

static void echo_handler(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	struct harness *h = ctx;
	const struct msgbuf *in = rpc_req_msg(req);
	uint32_t id;
	if (in->data_size >= 4) {
		memcpy(&id, in->buf, 4);
		if (id < MAX_REQS)
			h->executed[id]++;
	}
	struct msgbuf *out = rpc_resp_msg(rpc, req, in->data_size);
	cr_assert_not_null(out);
	memcpy(out->buf, in->buf, in->data_size);
	rpc_respond(rpc, req);
}

static void defer_handler(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	struct harness *h = ctx;
	(void)rpc;
	cr_assert_lt(h->n_deferred, 64);
	h->deferred[h->n_deferred++] = req;
}

static void on_done(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct pending *pd = tag;
	struct harness *h = pd->h;
	h->completed++;
	if (status) {
		h->failed++;
		h->last_err = status;
	} else if (!check(resp, pd->size, pd->id)) {
		h->verify_errors++;
	}
	rpc_free_msg(rpc, pd->req);
	free(pd);
}

static int send_one(struct harness *h, uint8_t type, uint32_t id, uint32_t size)
{
	struct pending *pd = calloc(1, sizeof(*pd));
	cr_assert_not_null(pd);
	pd->h = h;
	pd->id = id;
	pd->size = size;
	pd->req = rpc_alloc_msg(h->p.a, size);
	cr_assert_not_null(pd->req, "alloc %u", size);
	fill(pd->req, id);
	int rc = rpc_enqueue_request(h->p.a, h->p.sa, type, pd->req, on_done, pd);
	if (rc) {
		rpc_free_msg(h->p.a, pd->req);
		free(pd);
	}
	return rc;
}

struct wait_count {
	struct harness *h;
	unsigned want;
};

static bool reached(void *ctx)
{
	struct wait_count *w = ctx;
	return w->h->completed >= w->want;
}

static bool run_until_completed(struct harness *h, unsigned want)
{
	struct wait_count w = {h, want};
	return rpc_pair_run_until(&h->p, reached, &w, 60);
}

static struct harness *setup(const char *transport, const struct ferry_config *cfg)
{
	struct harness *h = calloc(1, sizeof(*h));
	cr_assert_not_null(h);
	char why[512] = "";
	int rc = rpc_pair_open(&h->p, transport, cfg, why, sizeof(why));
	if (rc == -ENODEV) {
		free(h);
		cr_skip_test("%s datapath not available here: %s", transport, why);
	}
	cr_assert_eq(rc, 0, "pair on %s: %s (%d)", transport, why, rc);
	rpc_lock(h->p.a);
	rpc_lock(h->p.b);
	cr_assert_eq(rpc_register_handler(h->p.b, REQ_ECHO, echo_handler, h), 0);
	cr_assert_eq(rpc_register_handler(h->p.b, REQ_DEFER, defer_handler, h), 0);
	cr_assert_eq(rpc_register_handler(h->p.b, REQ_ECHO, echo_handler, h), -EEXIST);
	return h;
}

static void teardown(struct harness *h)
{
	rpc_unlock(h->p.a);
	rpc_unlock(h->p.b);
	rpc_pair_close(&h->p);
	free(h);
}

ParameterizedTestParameters(rpc_protocol, echo_sizes)
{
	static struct transport_param t[] = TRANSPORT_PARAMS;
	return cr_make_param_array(struct transport_param, t, sizeof(t) / sizeof(t[0]));
}

ParameterizedTest(struct transport_param *tp, rpc_protocol, echo_sizes, .timeout = 240)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	/* One thread runs both ends here, so a peer busy faulting in 8 MB
	 * stalls the "network": only a long timeout keeps a clean path clean. */
	cfg.rto_us = 10000000;
	struct harness *h = setup(tp->name, &cfg);
	uint32_t dpp = rpc_max_pkt_data(h->p.a);
	const uint32_t sizes[] = {0, 1, 4, 31, dpp - 1, dpp, dpp + 1, 3 * dpp + 5, 65536,
				  1u << 20, RPC_MAX_MSG_SIZE};
	unsigned n = sizeof(sizes) / sizeof(sizes[0]);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(send_one(h, REQ_ECHO, i, sizes[i]), 0);
		cr_assert(run_until_completed(h, i + 1), "size %u did not complete", sizes[i]);
	}
	cr_assert_eq(h->failed, 0);
	cr_assert_eq(h->verify_errors, 0);
	char ja[2048], jb[2048];
	stats_format_json(&h->p.st_a, tp->name, ja, sizeof(ja));
	stats_format_json(&h->p.st_b, tp->name, jb, sizeof(jb));
	cr_assert_eq(h->p.st_a.drops + h->p.st_b.drops, 0, "no drops on a clean path:\n%s%s", ja, jb);
	cr_assert_eq(h->p.st_a.retransmits, 0, "retransmits on a clean path:\n%s%s", ja, jb);
	cr_assert_eq(h->p.st_a.requests_tx, n);
	cr_assert_eq(h->p.st_b.requests_rx, n);
	cr_assert_gt(h->p.st_b.bytes_rx, 9u << 20);
	cr_assert(rpc_max_pkt_data(h->p.a) + PKTHDR_SIZE == rpc_nic(h->p.a)->max_pkt_size);
	teardown(h);
}

ParameterizedTestParameters(rpc_protocol, backlog_and_credit_exhaustion)
{
	static struct transport_param t[] = TRANSPORT_PARAMS;
	return cr_make_param_array(struct transport_param, t, sizeof(t) / sizeof(t[0]));
}

ParameterizedTest(struct transport_param *tp, rpc_protocol, backlog_and_credit_exhaustion,
		  .timeout = 240)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	cfg.session_credits = 2; /* far fewer than the packets in flight */
	cfg.session_slots = 4;
	struct harness *h = setup(tp->name, &cfg);
	uint32_t dpp = rpc_max_pkt_data(h->p.a);
	const unsigned n = 200;
	srand(7);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(send_one(h, REQ_ECHO, i, 4 + (uint32_t)rand() % (5 * dpp)), 0);
	bool ok = run_until_completed(h, n);
	if (!ok) {
		rpc_dump(h->p.a, stderr);
		rpc_dump(h->p.b, stderr);
	}
	char ja[2048], jb[2048];
	stats_format_json(&h->p.st_a, tp->name, ja, sizeof(ja));
	stats_format_json(&h->p.st_b, tp->name, jb, sizeof(jb));
	cr_assert(ok, "%u of %u completed\n%s%s", h->completed, n, ja, jb);
	cr_assert_eq(h->failed, 0);
	cr_assert_eq(h->verify_errors, 0);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(h->executed[i], 1, "request %u ran %u times", i, h->executed[i]);
	teardown(h);
}

ParameterizedTestParameters(rpc_protocol, loss_dup_reorder_exactly_once)
{
	static struct transport_param t[] = TRANSPORT_PARAMS;
	return cr_make_param_array(struct transport_param, t, sizeof(t) / sizeof(t[0]));
}

ParameterizedTest(struct transport_param *tp, rpc_protocol, loss_dup_reorder_exactly_once,
		  .timeout = 240)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	char err[256];
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_FAULT", "drop=0.3,dup=0.1,reorder=0.1,seed=42",
				      err, sizeof(err)), 0, "%s", err);
	cfg.rto_us = 500;
	struct harness *h = setup(tp->name, &cfg);
	uint32_t dpp = rpc_max_pkt_data(h->p.a);
	const unsigned n = 300;
	srand(11);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(send_one(h, REQ_ECHO, i, 4 + (uint32_t)rand() % (4 * dpp)), 0);
	cr_assert(run_until_completed(h, n), "only %u of %u completed", h->completed, n);
	cr_assert_eq(h->failed, 0);
	cr_assert_eq(h->verify_errors, 0);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(h->executed[i], 1, "request %u ran %u times", i, h->executed[i]);
	cr_assert_gt(h->p.st_a.drop_fault + h->p.st_b.drop_fault, 0);
	cr_assert_gt(h->p.st_a.retransmits, 0);
	teardown(h);
}

/* Timely and the wheel, forced on where auto leaves them off: paced packets
 * whose slot went back must not be sent for the retransmission. */
/*
 * n echoes of up to max_pkts packets, answered by a responder that runs once
 * every 1.5 ms: round trips above Timely's T_high make it cut the rate, so
 * packets go through the wheel. Each is verified and run once.
 */
static void paced_echo(struct harness *h, unsigned n, unsigned seed, uint32_t max_pkts)
{
	uint32_t dpp = rpc_max_pkt_data(h->p.a);
	srand(seed);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(send_one(h, REQ_ECHO, i, 4 + (uint32_t)rand() % (max_pkts * dpp)), 0);
	for (unsigned pass = 0; h->completed < n && pass < 400000; pass++) {
		rpc_run_once(h->p.a);
		if (pass % 8 == 0) {
			usleep(1500);
			rpc_run_once(h->p.b);
		}
	}
	cr_assert_eq(h->completed, n, "only %u of %u completed", h->completed, n);
	cr_assert_eq(h->failed, 0);
	cr_assert_eq(h->verify_errors, 0);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(h->executed[i], 1, "request %u ran %u times", i, h->executed[i]);
	cr_assert_gt(h->p.st_a.pkts_paced, 0, "slow round trips must make Timely pace");
}

Test(rpc_protocol, paced_loss_exactly_once, .timeout = 240)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	char err[256];
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_FAULT", "drop=0.1,dup=0.05,reorder=0.05,seed=5",
				      err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_CC", "on", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_LINK_GBPS", "1", err, sizeof(err)), 0, "%s", err);
	cfg.rto_us = 500;
	struct harness *h = setup("test", &cfg);
	paced_echo(h, 300, 13, 8);
	cr_assert_gt(h->p.st_a.retransmits, 0);
	teardown(h);
}

ParameterizedTestParameters(rpc_protocol, deferred_response_and_reset)
{
	static struct transport_param t[] = TRANSPORT_PARAMS;
	return cr_make_param_array(struct transport_param, t, sizeof(t) / sizeof(t[0]));
}

struct wait_deferred {
	struct harness *h;
	unsigned want;
};

static bool deferred_arrived(void *ctx)
{
	struct wait_deferred *w = ctx;
	return w->h->n_deferred >= w->want;
}

ParameterizedTest(struct transport_param *tp, rpc_protocol, deferred_response_and_reset,
		  .timeout = 240)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	cfg.rto_us = 200; /* the held request is retransmitted meanwhile */
	struct harness *h = setup(tp->name, &cfg);
	/* One request answered later, from outside its handler. */
	cr_assert_eq(send_one(h, REQ_DEFER, 1, 100), 0);
	struct wait_deferred w = {h, 1};
	cr_assert(rpc_pair_run_until(&h->p, deferred_arrived, &w, 60));
	rpc_run_for_us(h->p.a, 2000);
	rpc_run_for_us(h->p.b, 2000);
	cr_assert_eq(h->completed, 0);
	cr_assert_eq(h->n_deferred, 1, "a retransmitted request must not run twice");
	struct rpc_req *req = h->deferred[0];
	const struct msgbuf *dummy = rpc_resp_msg(h->p.b, req, 100);
	cr_assert_not_null(dummy);
	uint32_t id = 1;
	for (uint32_t i = 0; i < 100; i++)
		dummy->buf[i] = pattern(id, i);
	memcpy(dummy->buf, &id, 4);
	rpc_respond(h->p.b, req);
	cr_assert(run_until_completed(h, 1));
	cr_assert_eq(h->failed, 0);
	cr_assert_eq(h->verify_errors, 0);

	/* Requests pending when the session is reset fail with the reset's error. */
	for (uint32_t i = 0; i < 20; i++)
		cr_assert_eq(send_one(h, REQ_DEFER, 10 + i, 64), 0);
	w.want = 2;
	cr_assert(rpc_pair_run_until(&h->p, deferred_arrived, &w, 60));
	rpc_session_reset(h->p.a, h->p.sa, -ECONNRESET);
	cr_assert_eq(h->completed, 21);
	cr_assert_eq(h->failed, 20);
	cr_assert_eq(h->last_err, -ECONNRESET);
	cr_assert_eq(send_one(h, REQ_ECHO, 99, 8), -ENOTCONN);
	/* The server side resets while its handler still holds a request:
	 * responding afterwards is harmless. */
	rpc_session_reset(h->p.b, h->p.sb, -ECONNRESET);
	for (unsigned i = 1; i < h->n_deferred; i++) {
		cr_assert_not_null(rpc_resp_msg(h->p.b, h->deferred[i], 10));
		rpc_respond(h->p.b, h->deferred[i]);
	}
	teardown(h);
}

ParameterizedTestParameters(rpc_protocol, hostile_packets_dropped_and_counted)
{
	static struct transport_param t[] = TRANSPORT_PARAMS;
	return cr_make_param_array(struct transport_param, t, sizeof(t) / sizeof(t[0]));
}

static struct nic_mr raw_mr;

static void raw_send(struct nic *from, struct nic_peer *to, const void *pkt, uint32_t len)
{
	struct nic_tx t = {.peer = to, .nsge = 1,
			   .sge = {{.addr = pkt, .len = len, .lkey = raw_mr.lkey}}};
	cr_assert_eq(nic_tx_burst(from, &t, 1), 1);
}

ParameterizedTest(struct transport_param *tp, rpc_protocol, hostile_packets_dropped_and_counted,
		  .timeout = 240)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	struct harness *h = setup(tp->name, &cfg);
	cr_assert_eq(send_one(h, REQ_ECHO, 1, 2000), 0);
	cr_assert(run_until_completed(h, 1));

	/* The attacker: a third nic of the same kind, aimed at b's endpoint. */
	char why[256];
	int err = 0;
	struct nic *evil;
	struct ferry_stats evil_st = {0};
	struct ferry_config ecfg = h->p.cfg_a;
	if (!strcmp(tp->name, "test")) {
		evil = nic_test_open(h->p.fabric, 4096, 64, &evil_st);
	} else if (!strcmp(tp->name, "udp")) {
		evil = nic_udp_open(&ecfg, &evil_st, &err, why, sizeof(why));
	} else {
		evil = nic_verbs_open_softib(&ecfg, &evil_st, &err, why, sizeof(why));
	}
	cr_assert_not_null(evil, "%s", why);
	struct nic_route rb;
	rpc_local_route(h->p.b, &rb);
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
	nic_route_fixup(evil, &rb, (struct sockaddr *)&lo, sizeof(lo));
	struct nic_peer *peer;
	cr_assert_eq(nic_peer_create(evil, &rb, &peer), 0);

	static uint8_t pkt[4096] __attribute__((aligned(4096)));
	/* Verbs datapaths read only registered memory, attackers included. */
	cr_assert_eq(nic_reg_mem(evil, pkt, sizeof(pkt), &raw_mr), 0);
	struct ferry_stats before = h->p.st_b;
	srand(3);
	for (int i = 0; i < 200; i++) { /* random bytes */
		uint32_t len = 1 + (uint32_t)rand() % 2000;
		for (uint32_t k = 0; k < len; k++)
			pkt[k] = (uint8_t)rand();
		raw_send(evil, peer, pkt, len);
	}
	raw_send(evil, peer, pkt, 10); /* truncated header */
	struct pkt_info pi = {.type = PKT_REQ, .req_type = REQ_ECHO,
			      .dest_session = (uint16_t)h->p.sb, .msg_size = 16, .req_num = 5000,
			      .token = rpc_session_token(h->p.b, h->p.sb) ^ 1};
	pkthdr_encode((struct pkthdr *)(void *)pkt, &pi);
	raw_send(evil, peer, pkt, PKTHDR_SIZE + 16); /* wrong token */
	pi.token ^= 1;
	pi.dest_session = 999;
	pkthdr_encode((struct pkthdr *)(void *)pkt, &pi);
	raw_send(evil, peer, pkt, PKTHDR_SIZE + 16); /* wrong session */
	pi.dest_session = (uint16_t)h->p.sb;
	pi.msg_size = 0xFFFFFFF0u;
	pkthdr_encode((struct pkthdr *)(void *)pkt, &pi);
	raw_send(evil, peer, pkt, PKTHDR_SIZE + 16); /* absurd size */
	pi.msg_size = 16;
	pkthdr_encode((struct pkthdr *)(void *)pkt, &pi);
	raw_send(evil, peer, pkt, PKTHDR_SIZE + 15); /* length disagrees */
	for (int i = 0; i < 2000; i++)
		rpc_run_once(h->p.b);
	nic_flush(evil);
	nic_peer_destroy(evil, peer);
	nic_dereg_mem(evil, &raw_mr);
	nic_close(evil);

	struct ferry_stats *st = &h->p.st_b;
	cr_assert_eq(h->executed[5000 % MAX_REQS], 0, "a forged request must not run");
	cr_assert_geq(st->drops - before.drops, 205, "drops %llu",
		      (unsigned long long)(st->drops - before.drops));
	cr_assert_geq(st->drop_short - before.drop_short, 1);
	cr_assert_geq(st->drop_token - before.drop_token, 1);
	cr_assert_geq(st->drop_session - before.drop_session, 1);
	cr_assert_geq(st->drop_size - before.drop_size, 2);
	cr_assert_geq(st->drop_magic - before.drop_magic, 100);
	/* The live session is unaffected. */
	cr_assert_eq(send_one(h, REQ_ECHO, 2, 5000), 0);
	cr_assert(run_until_completed(h, 2));
	cr_assert_eq(h->failed, 0);
	cr_assert_eq(h->verify_errors, 0);
	teardown(h);
}

/*
 * udp segmentation offload. 1,500-byte packets (FERRY_MTU), as across an
 * Ethernet, so a message's packets leave in segmented sends and arrive
 * coalesced even over loopback. Sizes up to 40 packets, so runs of equal
 * packets form.
 */
static struct harness *setup_udp_gso(const char *gso, const char *fault)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	char err[256];
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_MTU", "1500", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_UDP_GSO", gso, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_FAULT", fault, err, sizeof(err)), 0, "%s", err);
	cfg.rto_us = fault[0] == 'o' ? 10000000 : 500; /* "off": a clean path stays clean */
	return setup("udp", &cfg);
}

/* n echoes of sizes from seed, each verified byte for byte, each run once. */
static void bulk_echo(struct harness *h, unsigned n, unsigned seed)
{
	uint32_t dpp = rpc_max_pkt_data(h->p.a);
	srand(seed);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(send_one(h, REQ_ECHO, i, 4 + (uint32_t)rand() % (40 * dpp)), 0);
	char ja[2048], jb[2048];
	bool ok = run_until_completed(h, n);
	stats_format_json(&h->p.st_a, "udp", ja, sizeof(ja));
	stats_format_json(&h->p.st_b, "udp", jb, sizeof(jb));
	cr_assert(ok, "only %u of %u completed\n%s%s", h->completed, n, ja, jb);
	cr_assert_eq(h->failed, 0);
	cr_assert_eq(h->verify_errors, 0, "%u responses differ from their requests", h->verify_errors);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(h->executed[i], 1, "request %u ran %u times", i, h->executed[i]);
}

Test(rpc_protocol, udp_gso_on_and_off_give_the_same_bytes, .timeout = 240)
{
	const char *modes[] = {"off", "on"};
	for (unsigned m = 0; m < 2; m++) {
		struct harness *h = setup_udp_gso(modes[m], "off");
		bulk_echo(h, 200, 21); /* the same requests in both modes */
		const struct ferry_stats *a = &h->p.st_a, *b = &h->p.st_b;
		if (m == 0) {
			cr_assert_eq(a->udp_gso_sends + b->udp_gso_sends, 0);
			cr_assert_eq(a->udp_gro_datagrams + b->udp_gro_datagrams, 0);
		} else {
			cr_assert_gt(a->udp_gso_sends, 0, "requests leave in segmented sends");
			cr_assert_gt(b->udp_gso_sends, 0, "responses leave in segmented sends");
			cr_assert_gt(b->udp_gro_datagrams, 0, "requests arrive coalesced");
			cr_assert_gt(a->udp_gso_pkts, a->udp_gso_sends, "several packets a send");
		}
		cr_assert_eq(a->udp_gso_unsupported + a->udp_gso_refused, 0);
		cr_assert_eq(a->drop_gro + b->drop_gro + a->drop_bundle + b->drop_bundle, 0);
		teardown(h);
	}
}

/* A session's credits fill FERRY_CREDIT_BYTES of its packets, as the
 * bandwidth times the round trip needs (config.h): at 1,500-byte packets
 * far more than eRPC's 32, and a transfer over them carries every byte. */
Test(rpc_protocol, session_credits_are_sized_by_bytes, .timeout = 240)
{
	struct harness *h = setup_udp_gso("on", "off");
	uint32_t cursor = 0;
	struct rpc_session_info si;
	cr_assert(rpc_session_next(h->p.a, &cursor, &si));
	uint32_t dpp = rpc_max_pkt_data(h->p.a);
	cr_assert_eq(dpp, 1500 - 32, "FERRY_MTU=1500");
	cr_assert_eq(si.credits_max, 715, "1 MiB of 1,468-byte packets");
	bulk_echo(h, 20, 5);
	teardown(h);
}

static uint32_t session_credits_max(struct rpc *rpc, int num)
{
	uint32_t cursor = (uint32_t)num;
	struct rpc_session_info si;
	cr_assert(rpc_session_next(rpc, &cursor, &si));
	cr_assert_eq(si.num, num);
	return si.credits_max;
}

/* A pair of sessions between the harness's endpoints whose peers agreed
 * on dpp bytes a packet; returns the one on a. */
static int connect_sessions(struct harness *h, uint64_t token, uint32_t dpp)
{
	int a = rpc_session_create(h->p.a, token), b = rpc_session_create(h->p.b, token);
	cr_assert_geq(a, 0);
	cr_assert_geq(b, 0);
	struct nic_route ra, rb;
	rpc_local_route(h->p.a, &ra);
	rpc_local_route(h->p.b, &rb);
	cr_assert_eq(rpc_session_connect(h->p.a, a, &rb, (uint16_t)b, dpp), 0);
	cr_assert_eq(rpc_session_connect(h->p.b, b, &ra, (uint16_t)a, dpp), 0);
	return a;
}

/* Credits count packets of the size a session's peers agreed on, not the
 * nic's largest: udp's packets are 64 KB where a path's are 1,500 bytes,
 * and credits for the former held a session to 32 packets in flight. A
 * nic whose receive queue was sized for its credits caps them. */
Test(rpc_protocol, session_credits_follow_the_agreed_packet_size, .timeout = 240)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	struct harness *h = setup("test", &cfg);
	uint32_t nic_credits = ferry_session_credits(&cfg, 4096);
	uint32_t path_credits = ferry_session_credits(&cfg, 1440 + PKTHDR_SIZE);
	cr_assert_gt(path_credits, nic_credits);
	cr_assert_eq(session_credits_max(h->p.a, h->p.sa), nic_credits, "the nic's packets");
	int s = connect_sessions(h, 0xC4ED17, 1440);
	cr_assert_eq(session_credits_max(h->p.a, s), path_credits, "1,440 bytes a packet");
	h->p.sa = s; /* the echoes go on it, over its rings sized at connect */
	bulk_echo(h, 20, 3);
	rpc_nic(h->p.a)->max_session_credits = nic_credits + 1;
	s = connect_sessions(h, 0xC4ED18, 1440);
	cr_assert_eq(session_credits_max(h->p.a, s), nic_credits + 1, "the nic's cap");
	teardown(h);
}

Test(rpc_protocol, udp_gso_loss_dup_reorder_every_byte, .timeout = 240)
{
	struct harness *h = setup_udp_gso("on", "drop=0.05,dup=0.05,reorder=0.05,seed=17");
	bulk_echo(h, 150, 23);
	const struct ferry_stats *a = &h->p.st_a, *b = &h->p.st_b;
	cr_assert_gt(a->drop_fault + b->drop_fault, 0);
	cr_assert_gt(a->retransmits, 0);
	cr_assert_gt(a->udp_gso_sends, 0);
	cr_assert_gt(b->udp_gro_datagrams, 0);
	teardown(h);
}

/* Timely and the wheel over udp with offload: the nic segments only what
 * one tx_burst hands it, which the wheel released as due, so paced
 * packets keep their times and go-back-N its order. */
Test(rpc_protocol, udp_gso_paced_loss_every_byte, .timeout = 240)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	char err[256];
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_MTU", "1500", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_UDP_GSO", "on", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_FAULT", "drop=0.05,dup=0.02,reorder=0.02,seed=9",
				      err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_CC", "on", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_LINK_GBPS", "1", err, sizeof(err)), 0, "%s", err);
	/* Longer than the responder's pauses, and than the queue its batches
	 * let build up behind them: timeouts would leave no RTT sample (Karn),
	 * and without samples Timely never slows down (at 5 ms, one sanitizer
	 * run in three timed out from the start and never paced). */
	cfg.rto_us = 20000;
	struct harness *h = setup("udp", &cfg);
	paced_echo(h, 100, 29, 40);
	cr_assert_gt(h->p.st_b.udp_gso_sends, 0, "responses leave in segmented sends");
	teardown(h);
}

/* A session's send-time rings (a slot's times of its packets in flight) are
 * faulted in by the slots that send, not all at the session's creation: a
 * fork child that makes one session for one connection took a page per
 * slot, 16 at 64 slots of 128 credits. Made and connected: the rings are
 * mapped once the credits are known. */
Test(rpc_protocol, a_new_session_faults_in_no_page_per_slot, .timeout = 240)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	cfg.session_slots = 64;
	cfg.session_credits = 128;
	struct rpc_pair p;
	char why[256];
	cr_assert_eq(rpc_pair_open(&p, "test", &cfg, why, sizeof(why)), 0, "%s", why);
	rpc_lock(p.a);
	struct nic_route rb;
	rpc_local_route(p.b, &rb);
	struct rusage before, after;
	getrusage(RUSAGE_SELF, &before);
	int s = rpc_session_create(p.a, 42);
	int rc = s >= 0 ? rpc_session_connect(p.a, s, &rb, (uint16_t)p.sb, rpc_max_pkt_data(p.a)) : s;
	getrusage(RUSAGE_SELF, &after);
	rpc_unlock(p.a);
	cr_assert_eq(rc, 0, "session made and connected");
	long faults = after.ru_minflt - before.ru_minflt;
	/* The rings alone are 16 pages: making them all took 20 faults here,
	 * the session itself takes 3 (10 under AddressSanitizer). */
	cr_expect_lt(faults, 16, "a session of 64 slots took %ld page faults to make", faults);
	rpc_pair_close(&p);
}
