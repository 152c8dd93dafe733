/*
 * The protocol under many random mixes at once, where the chosen-loss tests
 * (test_rpc_gobackn) each build one order by hand: per seed, loss,
 * duplication and reordering rates, Timely pacing on or off, the credit
 * window, the retransmission timeout, how many requests are out at once
 * (for some seeds one, so a slot that stalls has no neighbour whose answers
 * push it along) and how often the responder runs. Every request must
 * complete exactly once with its bytes. A stall (no request completing for
 * far longer than any backed-off timeout) fails with the seed that made it;
 * FERRY_TEST_SOAK_SEEDS=FROM-TO repeats a range. It found a requester that
 * took a late NACK and then sent nothing: before 47ef58e's fix, every ten
 * seeds of the default range had one that stalled (2, 13, 23, 37 in one run).
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/rpc_pair.h"
#include "transport/clock.h"

#define REQ_ECHO 1
#define SOAK_REQS 200
/* Far past the longest backed-off timeout a seed can choose (320 us << 6). */
#define SOAK_STALL_NS (5ull * 1000000000ull)

struct soak {
	unsigned executed[SOAK_REQS];
	unsigned completed, failed, corrupt;
	uint64_t rng;
};

struct soak_req {
	struct soak *k;
	struct msgbuf *req;
	uint32_t size;
};

static unsigned soak_rand(struct soak *k, unsigned below)
{
	k->rng = k->rng * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)(k->rng >> 33) % below;
}

static void soak_echo(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	struct soak *k = ctx;
	const struct msgbuf *in = rpc_req_msg(req);
	uint32_t id;
	memcpy(&id, in->buf, sizeof(id));
	if (id < SOAK_REQS)
		k->executed[id]++;
	struct msgbuf *out = rpc_resp_msg(rpc, req, in->data_size);
	cr_assert_not_null(out);
	memcpy(out->buf, in->buf, in->data_size);
	rpc_respond(rpc, req);
}

static void soak_done(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct soak_req *sr = tag;
	struct soak *k = sr->k;
	k->completed++;
	if (status)
		k->failed++;
	else if (resp->data_size != sr->size || memcmp(resp->buf, sr->req->buf, sr->size) != 0)
		k->corrupt++;
	rpc_free_msg(rpc, sr->req);
	free(sr);
}

static void soak_send(struct rpc_pair *p, struct soak *k, uint32_t id)
{
	uint32_t dpp = rpc_max_pkt_data(p->a);
	struct soak_req *sr = calloc(1, sizeof(*sr));
	cr_assert_not_null(sr);
	sr->k = k;
	/* Mostly a packet or two, now and then up to a dozen. */
	sr->size = 4 + soak_rand(k, soak_rand(k, 2) ? 2 * dpp : 12 * dpp);
	sr->req = rpc_alloc_msg(p->a, sr->size);
	cr_assert_not_null(sr->req);
	for (uint32_t i = 0; i < sr->size; i++)
		sr->req->buf[i] = (uint8_t)(i * 31u + id);
	memcpy(sr->req->buf, &id, sizeof(id));
	cr_assert_eq(rpc_enqueue_request(p->a, p->sa, REQ_ECHO, sr->req, soak_done, sr), 0);
}

static void soak_one(unsigned seed)
{
	struct soak *k = calloc(1, sizeof(*k));
	cr_assert_not_null(k);
	k->rng = seed * 7919ull;
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	char err[256], fault[128];
	snprintf(fault, sizeof(fault), "drop=0.%u,dup=0.%u,reorder=0.%u,seed=%u",
		 1 + soak_rand(k, 3), soak_rand(k, 2), soak_rand(k, 3), seed);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_FAULT", fault, err, sizeof(err)), 0, "%s", err);
	bool cc = soak_rand(k, 2);
	if (cc) {
		cr_assert_eq(ferry_config_set(&cfg, "FERRY_CC", "on", err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(ferry_config_set(&cfg, "FERRY_LINK_GBPS", "1", err, sizeof(err)), 0,
			     "%s", err);
	}
	cfg.session_credits = soak_rand(k, 3) == 0 ? 8 + soak_rand(k, 32) : 0;
	cfg.rto_us = 20 + soak_rand(k, 300);
	struct rpc_pair p;
	char why[256];
	cr_assert_eq(rpc_pair_open(&p, "test", &cfg, why, sizeof(why)), 0, "%s", why);
	rpc_lock(p.a);
	rpc_lock(p.b);
	cr_assert_eq(rpc_register_handler(p.b, REQ_ECHO, soak_echo, k), 0);
	/* 0: the responder runs every turn; otherwise one turn in 4, 8 or 12. */
	unsigned lag = soak_rand(k, 4);
	/* Long sleeps between turns, as a descheduled process has. */
	bool sleepy = soak_rand(k, 2);
	/* One request out at a time: a stuck slot then has no neighbour
	 * whose answers push it along. */
	bool solo = soak_rand(k, 3) == 0;
	uint64_t b_paused_until = 0;
	unsigned sent = 0, seen = 0;
	uint64_t progress = clock_now_ns();
	while (k->completed < SOAK_REQS) {
		/* Up to 64 out at once, the limit drawn again for each send. */
		while (sent < SOAK_REQS && sent - k->completed < (solo ? 1 : 1 + soak_rand(k, 64)))
			soak_send(&p, k, sent++);
		rpc_run_once(p.a);
		/* Now and then the responder stops for up to three timeouts:
		 * the requester goes back while its packets wait there. */
		uint64_t now = clock_now_ns();
		if (soak_rand(k, 300) == 0)
			b_paused_until = now + (uint64_t)soak_rand(k, 3 * cfg.rto_us) * 1000u;
		if (now >= b_paused_until && (lag == 0 || soak_rand(k, 4 * lag) == 0))
			rpc_run_once(p.b);
		/* Round trips now and then long enough for Timely to slow down. */
		if (soak_rand(k, sleepy ? 10 : 200) == 0)
			usleep(soak_rand(k, sleepy ? 2 * cfg.rto_us : 1500));
		now = clock_now_ns();
		if (k->completed != seen) {
			seen = k->completed;
			progress = now;
		}
		cr_assert_lt(now - progress, SOAK_STALL_NS,
			     "seed %u (%s, cc %d, credits %u, rto %u us, lag %u, solo %d): stalled "
			     "at %u of %u",
			     seed, fault, cc, cfg.session_credits, cfg.rto_us, lag, solo, k->completed,
			     SOAK_REQS);
	}
	cr_assert_eq(k->failed, 0, "seed %u: %u requests failed", seed, k->failed);
	cr_assert_eq(k->corrupt, 0, "seed %u: %u responses differ", seed, k->corrupt);
	for (unsigned i = 0; i < SOAK_REQS; i++)
		cr_assert_eq(k->executed[i], 1, "seed %u: request %u ran %u times", seed, i,
			     k->executed[i]);
	rpc_unlock(p.a);
	rpc_unlock(p.b);
	rpc_pair_close(&p);
	free(k);
}

Test(rpc_soak, random_faults_and_schedules_complete_every_request_once, .timeout = 600)
{
	unsigned from = 1, to = 40;
	const char *range = getenv("FERRY_TEST_SOAK_SEEDS");
	if (range)
		cr_assert_eq(sscanf(range, "%u-%u", &from, &to), 2,
			     "FERRY_TEST_SOAK_SEEDS=%s: expected FROM-TO", range);
	for (unsigned seed = from; seed <= to; seed++)
		soak_one(seed);
}
