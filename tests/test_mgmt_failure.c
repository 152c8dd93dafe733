/*
 * Failure detection: a server process killed with requests pending. Every
 * continuation completes with -ECONNRESET once heartbeats go unanswered,
 * and the client stays usable.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_mgmt_util.h"
#include "transport/clock.h"

#define FAILURE_MS 300
#define HEARTBEAT_MS 50
#define PENDING 4

struct server {
	pid_t pid;
	uint16_t port;
	int events; /* read end: one byte per HOLD_REQ the server received */
};

static void hold(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	(void)rpc;
	(void)req;
	int fd = *(int *)ctx;
	/* Never answered: the request stays pending until the process dies. */
	ssize_t n = write(fd, "h", 1);
	(void)n;
}

static void server_child(int port_fd, int event_fd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct nexus *nx = tmu_nexus(FAILURE_MS, HEARTBEAT_MS);
	uint16_t port = tmu_serve(nx);
	struct rpc *rpc = nexus_rpc(nx);
	rpc_lock(rpc);
	rpc_register_handler(rpc, HOLD_REQ, hold, &event_fd);
	rpc_unlock(rpc);
	if (write(port_fd, &port, sizeof(port)) != sizeof(port))
		_exit(1);
	for (;;)
		tmu_turn(rpc);
}

static struct server server_start(void)
{
	int pfd[2], efd[2];
	cr_assert_eq(pipe(pfd), 0);
	cr_assert_eq(pipe(efd), 0);
	struct server s = {.pid = fork()};
	cr_assert_geq(s.pid, 0);
	if (s.pid == 0) {
		close(pfd[0]);
		close(efd[0]);
		server_child(pfd[1], efd[1]);
	}
	close(pfd[1]);
	close(efd[1]);
	cr_assert_eq(read(pfd[0], &s.port, sizeof(s.port)), (ssize_t)sizeof(s.port));
	close(pfd[0]);
	s.events = efd[0];
	return s;
}

static void server_kill(struct server *s)
{
	kill(s->pid, SIGKILL);
	int status;
	cr_assert_eq(waitpid(s->pid, &status, 0), s->pid);
	cr_assert(WIFSIGNALED(status));
	close(s->events);
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

Test(mgmt_failure, killed_server_fails_pending_requests_and_client_recovers, .timeout = 60)
{
	/* The first server is forked before this process has threads. */
	struct server srv = server_start();
	struct nexus *nx = tmu_nexus(FAILURE_MS, HEARTBEAT_MS);
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
	for (int got = 0; got < PENDING;) {
		tmu_turn(rpc);
		char b[PENDING];
		ssize_t n = read(srv.events, b, sizeof(b));
		if (n > 0)
			got += (int)n;
		struct pollfd p = {.fd = srv.events, .events = POLLIN};
		if (got < PENDING)
			poll(&p, 1, 0);
	}
	cr_assert_eq(atomic_load(&completed), 0);

	uint64_t t0 = clock_now_ns();
	server_kill(&srv);
	while (atomic_load(&completed) < PENDING)
		tmu_turn(rpc);
	cr_log_info("pending requests failed %llu ms after the kill (failure timeout %u ms)",
		    (unsigned long long)((clock_now_ns() - t0) / 1000000), FAILURE_MS);
	for (int i = 0; i < PENDING; i++)
		cr_assert_eq(statuses[i], -ECONNRESET, "request %d: %d", i, statuses[i]);
	cr_assert_eq(nexus_stats(nx)->dead_peers, 1);
	cr_assert_eq(nexus_stats(nx)->sessions_closed, 1);
	rpc_lock(rpc);
	cr_assert_not(rpc_session_is_up(rpc, s));
	for (int i = 0; i < PENDING; i++)
		rpc_free_msg(rpc, reqs[i]);
	rpc_unlock(rpc);

	/* The process is fine: a new server, a new session, a real call. */
	struct server again = server_start();
	int s2 = connect_to(nx, again.port);
	cr_assert_geq(s2, 0, "connect again: %s", strerror(-s2));
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s2, ECHO_REQ, 100, &c), 0);
	cr_assert_eq(c.resp_size, 100);
	server_kill(&again);
	nexus_destroy(nx);
}

Test(mgmt_failure, heartbeats_keep_an_idle_session_alive, .timeout = 60)
{
	struct server srv = server_start();
	struct nexus *nx = tmu_nexus(FAILURE_MS, HEARTBEAT_MS);
	struct rpc *rpc = nexus_rpc(nx);
	int s = connect_to(nx, srv.port);
	cr_assert_geq(s, 0);
	/* Idle for several failure timeouts: only heartbeats keep it up. */
	usleep(5 * FAILURE_MS * 1000);
	cr_assert_eq(nexus_stats(nx)->dead_peers, 0);
	rpc_lock(rpc);
	cr_assert(rpc_session_is_up(rpc, s));
	rpc_unlock(rpc);
	struct tmu_call c;
	cr_assert_eq(tmu_call(rpc, s, ECHO_REQ, 10, &c), 0);
	server_kill(&srv);
	nexus_destroy(nx);
}
