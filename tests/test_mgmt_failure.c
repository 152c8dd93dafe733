/*
 * Failure detection: a server process on this host killed with requests
 * pending is noticed the moment it dies (its pidfd), not a failure timeout
 * later: every continuation completes with -EOWNERDEAD and the client stays
 * usable. A stopped one is stalled, not dead, however long it is silent.
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_mgmt_util.h"
#include "transport/clock.h"

#define FAILURE_MS 300
#define HEARTBEAT_MS 50
#define PENDING 4
/* Longer than any test's own timeout: only a death notice ends a wait. */
#define PATIENT_MS 600000

static struct tmu_server server_start(unsigned failure_ms)
{
	struct ferry_config cfg = tmu_config(failure_ms, HEARTBEAT_MS);
	return tmu_server_fork(&cfg);
}

static int connect_to(struct nexus *nx, uint16_t port)
{
	struct sockaddr_in a = tmu_loopback(port);
	return mgmt_connect(nexus_mgmt(nx), nexus_rpc(nx), (struct sockaddr *)&a, sizeof(a), 5000);
}

static atomic_int completed;
static int statuses[PENDING];

static void pending_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	(void)resp;
	statuses[(intptr_t)tag] = status;
	atomic_fetch_add(&completed, 1);
	(void)rpc;
}

/* A served endpoint whose loop runs in a thread, and a client's session
 * to it: the start of the tests below. */
struct served {
	struct nexus *server, *client;
	struct tmu_looper loop;
	int session;
};

static void serve_and_connect(struct served *sv)
{
	sv->server = tmu_nexus(FAILURE_MS, HEARTBEAT_MS);
	uint16_t port = tmu_serve(sv->server);
	tmu_loop_start(&sv->loop, nexus_rpc(sv->server));
	sv->client = tmu_nexus(FAILURE_MS, HEARTBEAT_MS);
	sv->session = connect_to(sv->client, port);
	cr_assert_geq(sv->session, 0, "connect: %s", strerror(-sv->session));
}

Test(mgmt_failure, killed_server_fails_pending_requests_and_client_recovers, .timeout = 60)
{
	/* The first server is forked before this process has threads. */
	struct tmu_server srv = server_start(PATIENT_MS);
	struct nexus *nx = tmu_nexus(PATIENT_MS, HEARTBEAT_MS);
	struct rpc *rpc = nexus_rpc(nx);
	int s = connect_to(nx, srv.port);
	cr_assert_geq(s, 0, "connect: %s", strerror(-s));

	struct msgbuf *reqs[PENDING];
	rpc_lock(rpc);
	for (int i = 0; i < PENDING; i++) {
		reqs[i] = rpc_alloc_msg(rpc, 64);
		cr_assert_not_null(reqs[i]);
		memset(reqs[i]->buf, i, 64);
		cr_assert_eq(rpc_enqueue_request(rpc, s, HOLD_REQ, reqs[i], pending_cont,
						 (void *)(intptr_t)i),
			     0);
	}
	rpc_unlock(rpc);

	/* Run until the server holds every request, so they are truly pending
	 * on its side when it dies. */
	tmu_wait_held(rpc, &srv, PENDING);
	cr_assert_eq(atomic_load(&completed), 0);

	uint64_t t0 = clock_now_ns();
	tmu_server_kill(&srv);
	while (atomic_load(&completed) < PENDING)
		tmu_turn(rpc);
	cr_log_info("pending requests failed %llu ms after the kill (failure timeout %u ms)",
		    (unsigned long long)((clock_now_ns() - t0) / 1000000), PATIENT_MS);
	for (int i = 0; i < PENDING; i++)
		cr_assert_eq(statuses[i], -EOWNERDEAD, "request %d: %d", i, statuses[i]);
	cr_assert_eq(nexus_stats(nx)->dead_peers, 1);
	cr_assert_eq(nexus_stats(nx)->sessions_closed, 1);
	rpc_lock(rpc);
	cr_assert_not(rpc_session_is_up(rpc, s));
	for (int i = 0; i < PENDING; i++)
		rpc_free_msg(rpc, reqs[i]);
	rpc_unlock(rpc);

	/* The process is fine: a new server, a new session, a real call. */
	struct tmu_server again = server_start(PATIENT_MS);
	int s2 = connect_to(nx, again.port);
	cr_assert_geq(s2, 0, "connect again: %s", strerror(-s2));
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s2, ECHO_REQ, 100, &c), 0);
	cr_assert_eq(c.resp_size, 100);
	tmu_server_kill(&again);
	nexus_destroy(nx);
}

/* A peer not watched by pidfd (this process's own second endpoint stands
 * in for another host's) answers pings: idle for several failure timeouts,
 * only heartbeats keep its session up. */
Test(mgmt_failure, heartbeats_keep_an_idle_session_alive, .timeout = 60)
{
	struct served sv;
	serve_and_connect(&sv);
	struct nexus *server = sv.server, *nx = sv.client;
	struct rpc *rpc = nexus_rpc(nx);
	int s = sv.session;
	usleep(5 * FAILURE_MS * 1000);
	cr_assert_eq(nexus_stats(nx)->dead_peers, 0);
	rpc_lock(rpc);
	cr_assert(rpc_session_is_up(rpc, s));
	rpc_unlock(rpc);
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s, ECHO_REQ, 10, &c), 0);
	nexus_destroy(nx);
	tmu_loop_stop(&sv.loop);
	nexus_destroy(server);
}

/* A peer whose management thread is starved (held here) answers no ping,
 * but its answers on the datapath keep coming: it lives, and nothing it
 * carries is reset. */
Test(mgmt_failure, a_peer_whose_datapath_answers_is_not_declared_dead, .timeout = 60)
{
	struct served sv;
	serve_and_connect(&sv);
	struct nexus *server = sv.server, *nx = sv.client;
	struct rpc *rpc = nexus_rpc(nx);
	int s = sv.session;
	mgmt_hold(nexus_mgmt(server));
	uint64_t end = clock_now_ns() + 5ull * FAILURE_MS * 1000000ull;
	unsigned calls = 0;
	while (clock_now_ns() < end) {
		struct tmu_call c;
		cr_assert_eq(tmu_call(rpc, s, ECHO_REQ, 10, &c), 0, "call %u failed", calls);
		calls++;
		usleep(2000);
	}
	cr_assert_eq(nexus_stats(nx)->dead_peers, 0, "a peer whose datapath answered was declared dead");
	mgmt_release(nexus_mgmt(server));
	nexus_destroy(nx);
	tmu_loop_stop(&sv.loop);
	nexus_destroy(server);
}

/* A peer on this host stopped (SIGSTOP) for many failure timeouts keeps its
 * session: its silence is a stall, as kernel TCP waits out a stopped
 * process, and calls go on once it runs again. */
Test(mgmt_failure, a_stopped_peer_on_this_host_is_not_declared_dead, .timeout = 60)
{
	struct tmu_server srv = server_start(FAILURE_MS);
	struct nexus *nx = tmu_nexus(FAILURE_MS, HEARTBEAT_MS);
	struct rpc *rpc = nexus_rpc(nx);
	int s = connect_to(nx, srv.port);
	cr_assert_geq(s, 0, "connect: %s", strerror(-s));
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s, ECHO_REQ, 10, &c), 0);
	cr_assert_eq(kill(srv.pid, SIGSTOP), 0);
	usleep(5 * FAILURE_MS * 1000);
	cr_assert_eq(nexus_stats(nx)->dead_peers, 0, "a stopped peer was declared dead");
	cr_assert_eq(kill(srv.pid, SIGCONT), 0);
	cr_assert_eq(tmu_call(rpc, s, ECHO_REQ, 100, &c), 0, "no answer once it runs again");
	cr_assert_eq(c.resp_size, 100);
	tmu_server_kill(&srv);
	nexus_destroy(nx);
}

/* A peer process killed (no goodbye) is noticed at once, long before the
 * failure timeout (ten minutes here, past the test's own timeout). */
Test(mgmt_failure, a_killed_peer_is_noticed_before_the_failure_timeout, .timeout = 60)
{
	struct ferry_config cfg = tmu_config(PATIENT_MS, HEARTBEAT_MS);
	struct tmu_server srv = tmu_server_fork(&cfg);
	struct nexus *nx = tmu_nexus_with(&cfg);
	struct rpc *rpc = nexus_rpc(nx);
	int s = connect_to(nx, srv.port);
	cr_assert_geq(s, 0, "connect: %s", strerror(-s));
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s, ECHO_REQ, 10, &c), 0);
	tmu_server_kill(&srv);
	while (nexus_stats(nx)->dead_peers == 0) /* the test's timeout guards */
		usleep(1000);
	rpc_lock(rpc);
	bool up = rpc_session_is_up(rpc, s);
	rpc_unlock(rpc);
	cr_assert_not(up, "the dead peer's session is still up");
	nexus_destroy(nx);
}

/* A peer not watched by pidfd that falls silent (its endpoint and its
 * management thread both stopped: another host gone quiet) is declared dead
 * after the failure timeout; its pending request fails with -ETIMEDOUT, as
 * kernel TCP's retransmissions time out. */
Test(mgmt_failure, a_silent_unwatched_peer_times_out, .timeout = 60)
{
	struct served sv;
	serve_and_connect(&sv);
	struct nexus *server = sv.server, *nx = sv.client;
	struct rpc *rpc = nexus_rpc(nx);
	int s = sv.session;
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s, ECHO_REQ, 10, &c), 0);
	tmu_loop_stop(&sv.loop);
	mgmt_hold(nexus_mgmt(server));
	cr_assert_eq(tmu_call(rpc, s, ECHO_REQ, 10, &c), -ETIMEDOUT);
	cr_assert_eq(nexus_stats(nx)->dead_peers, 1);
	mgmt_release(nexus_mgmt(server));
	nexus_destroy(nx);
	nexus_destroy(server);
}
