/*
 * Two processes over udp on loopback: 10,000 echo requests of random sizes
 * from 1 B to 1 MB with 1% of packets dropped on both sides, every byte
 * verified; then the server is SIGKILLed with requests pending, and each of
 * them fails within twice the failure timeout while the client stays usable.
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_mgmt_util.h"
#include "transport/clock.h"
#include "transport/stats.h"

#define FAILURE_MS 1000
#define REQUESTS 10000
#define OUTSTANDING 8
#define MAX_SIZE (1u << 20)

static struct ferry_config lossy_config(uint64_t seed)
{
	struct ferry_config cfg = tmu_config(FAILURE_MS, 0);
	cfg.fault.drop = 0.01;
	cfg.fault.seed = seed;
	return cfg;
}

static uint8_t pattern(uint32_t id, uint32_t i) { return (uint8_t)(id * 2654435761u + i * 40503u + (i >> 9)); }

struct call {
	uint32_t id, size;
	struct msgbuf *req;
};

static atomic_uint completed, mismatches, errors;
static int last_error;

static void echo_done(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct call *c = tag;
	if (status) {
		errors++;
		last_error = status;
	} else if (resp->data_size != c->size) {
		mismatches++;
	} else {
		for (uint32_t i = 0; i < c->size; i++)
			if (resp->buf[i] != pattern(c->id, i)) {
				mismatches++;
				break;
			}
	}
	rpc_free_msg(rpc, c->req);
	c->req = NULL;
	completed++;
}

/* Log-uniform over 1 B .. 1 MB, so small and large messages both get exercised. */
static uint32_t random_size(uint32_t id)
{
	if (id == 0)
		return 1;
	if (id == 1)
		return MAX_SIZE;
	double e = (double)rand() / RAND_MAX * 20.0;
	uint32_t s = (uint32_t)__builtin_exp2(e);
	return s < 1 ? 1 : (s > MAX_SIZE ? MAX_SIZE : s);
}

static void send_call(struct rpc *rpc, int session, struct call *c, uint32_t id)
{
	c->id = id;
	c->size = random_size(id);
	c->req = rpc_alloc_msg(rpc, c->size);
	cr_assert_not_null(c->req);
	for (uint32_t i = 0; i < c->size; i++)
		c->req->buf[i] = pattern(id, i);
	cr_assert_eq(rpc_enqueue_request(rpc, session, ECHO_REQ, c->req, echo_done, c), 0);
}

static atomic_int failed_pending;
static int pending_status[OUTSTANDING];

static void held_done(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	(void)rpc;
	(void)resp;
	pending_status[(intptr_t)tag] = status;
	failed_pending++;
}

Test(rpc_two_process, lossy_echo_then_server_killed, .timeout = 600)
{
	srand(2024);
	struct ferry_config scfg = lossy_config(77), ccfg = lossy_config(78);
	struct tmu_server srv = tmu_server_fork(&scfg);
	struct nexus *nx = tmu_nexus_with(&ccfg);
	struct rpc *rpc = nexus_rpc(nx);
	struct sockaddr_in a = tmu_loopback(srv.port);
	int s = mgmt_connect(nexus_mgmt(nx), rpc, (struct sockaddr *)&a, sizeof(a), 5000);
	cr_assert_geq(s, 0, "connect: %s", strerror(-s));

	static struct call calls[OUTSTANDING];
	uint32_t next = 0;
	uint64_t bytes = 0;
	rpc_lock(rpc);
	for (; next < OUTSTANDING; next++) {
		send_call(rpc, s, &calls[next], next);
		bytes += calls[next].size;
	}
	rpc_unlock(rpc);
	while (completed < REQUESTS) {
		tmu_turn(rpc);
		rpc_lock(rpc);
		for (unsigned i = 0; i < OUTSTANDING && next < REQUESTS; i++) {
			if (!calls[i].req) {
				send_call(rpc, s, &calls[i], next++);
				bytes += calls[i].size;
			}
		}
		rpc_unlock(rpc);
		cr_assert_eq(errors, 0, "a request failed: %d", last_error);
	}
	cr_assert_eq(mismatches, 0);
	const struct ferry_stats *st = nexus_stats(nx);
	cr_log_info("%u requests, %llu bytes each way, %llu packets dropped by the fault knob, "
		    "%llu retransmitted", REQUESTS, (unsigned long long)bytes,
		    (unsigned long long)st->drop_fault, (unsigned long long)st->retransmits);
	cr_assert_gt(st->drop_fault, 0, "the fault knob dropped nothing");
	cr_assert_gt(st->retransmits, 0);

	/* Requests the server holds when it dies. */
	struct msgbuf *held[OUTSTANDING];
	rpc_lock(rpc);
	for (intptr_t i = 0; i < OUTSTANDING; i++) {
		held[i] = rpc_alloc_msg(rpc, 100);
		cr_assert_eq(rpc_enqueue_request(rpc, s, HOLD_REQ, held[i], held_done, (void *)i), 0);
	}
	rpc_unlock(rpc);
	tmu_wait_held(rpc, &srv, OUTSTANDING);
	cr_assert_eq(failed_pending, 0);
	uint64_t t0 = clock_now_ns();
	kill(srv.pid, SIGKILL);
	int status;
	cr_assert_eq(waitpid(srv.pid, &status, 0), srv.pid);
	/* Only a hang guard here; the deadline is asserted below. */
	while (failed_pending < OUTSTANDING && clock_now_ns() - t0 < 30000000000ull)
		tmu_turn(rpc);
	uint64_t ms = (clock_now_ns() - t0) / 1000000;
	cr_log_info("pending requests failed %llu ms after SIGKILL (failure timeout %u ms)",
		    (unsigned long long)ms, FAILURE_MS);
	cr_assert_eq(failed_pending, OUTSTANDING);
	for (int i = 0; i < OUTSTANDING; i++)
		cr_assert_eq(pending_status[i], -EOWNERDEAD); /* its pidfd: it is gone */
	/* The contract: failure is reported within twice the timeout. */
	cr_assert_leq(ms, 2 * FAILURE_MS, "failure reported after %llu ms", (unsigned long long)ms);
	rpc_lock(rpc);
	for (int i = 0; i < OUTSTANDING; i++)
		rpc_free_msg(rpc, held[i]);
	rpc_unlock(rpc);

	/* The client process is healthy: a fresh server answers it. */
	struct ferry_config acfg = lossy_config(79);
	struct tmu_server again = tmu_server_fork(&acfg);
	a = tmu_loopback(again.port);
	int s2 = mgmt_connect(nexus_mgmt(nx), rpc, (struct sockaddr *)&a, sizeof(a), 5000);
	cr_assert_geq(s2, 0);
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s2, ECHO_REQ, 3000, &c), 0);
	cr_assert_eq(c.resp_size, 3000);
	tmu_server_kill(&again);
	close(srv.held);
	nexus_destroy(nx);
}
