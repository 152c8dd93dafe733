/* Helpers shared by the mgmt tests: nexus setup, an event-loop thread, echo calls. */
#ifndef FERRY_TEST_MGMT_UTIL_H
#define FERRY_TEST_MGMT_UTIL_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

#include "mgmt/mgmt.h"
#include "mgmt/nexus.h"
#include "transport/config.h"
#include "transport/rpc.h"

#define ECHO_REQ 1 /* answered with the same bytes */
#define HOLD_REQ 2 /* never answered */

/* udp, errors only, and the given timeouts (0 keeps the default). */
static inline struct ferry_config tmu_config(unsigned failure_ms, unsigned heartbeat_ms)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	cfg.transport = FERRY_TRANSPORT_UDP;
	cfg.log_level = FERRY_LOG_ERROR;
	if (failure_ms)
		cfg.failure_timeout_ms = failure_ms;
	if (heartbeat_ms)
		cfg.heartbeat_ms = heartbeat_ms;
	return cfg;
}

static inline struct nexus *tmu_nexus_with(const struct ferry_config *cfg)
{
	char msg[256] = "";
	int err = 0;
	struct nexus *nx = nexus_create(cfg, &err, msg, sizeof(msg));
	cr_assert_not_null(nx, "nexus_create: %d %s", err, msg);
	return nx;
}

static inline struct nexus *tmu_nexus(unsigned failure_ms, unsigned heartbeat_ms)
{
	struct ferry_config cfg = tmu_config(failure_ms, heartbeat_ms);
	return tmu_nexus_with(&cfg);
}

static inline struct sockaddr_in tmu_loopback(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static inline void tmu_echo(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	(void)ctx;
	const struct msgbuf *in = rpc_req_msg(req);
	struct msgbuf *out = rpc_resp_msg(rpc, req, in->data_size);
	cr_assert_not_null(out);
	memcpy(out->buf, in->buf, in->data_size);
	rpc_respond(rpc, req);
}

/* Registers ECHO_REQ and listens on 127.0.0.1, port 0; returns the port. */
static inline uint16_t tmu_serve(struct nexus *nx)
{
	struct rpc *rpc = nexus_rpc(nx);
	rpc_lock(rpc);
	int rc = rpc_register_handler(rpc, ECHO_REQ, tmu_echo, NULL);
	rpc_unlock(rpc);
	cr_assert_eq(rc, 0);
	struct sockaddr_in a = tmu_loopback(0);
	cr_assert_eq(mgmt_listen(nexus_mgmt(nx), rpc, (struct sockaddr *)&a, sizeof(a)), 0);
	uint16_t port = mgmt_listen_port(nexus_mgmt(nx), (struct sockaddr *)&a, sizeof(a));
	cr_assert_neq(port, 0);
	return port;
}

/* One turn of the event loop; sleeps on the notify fd (1 ms at most, so
 * timers still run) when nothing moved. */
static inline unsigned tmu_turn(struct rpc *rpc)
{
	rpc_lock(rpc);
	unsigned n = rpc_run_once(rpc);
	int armed = n == 0 ? rpc_arm_notify(rpc) : 1;
	int fd = rpc_notify_fd(rpc);
	rpc_unlock(rpc);
	if (armed == 0 && fd >= 0) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		poll(&p, 1, 1);
	}
	return n;
}

struct tmu_looper {
	struct rpc *rpc;
	atomic_bool stop;
	pthread_t thread;
};

static inline void *tmu_loop_main(void *arg)
{
	struct tmu_looper *l = arg;
	while (!atomic_load(&l->stop))
		tmu_turn(l->rpc);
	return NULL;
}

static inline void tmu_loop_start(struct tmu_looper *l, struct rpc *rpc)
{
	l->rpc = rpc;
	atomic_init(&l->stop, false);
	cr_assert_eq(pthread_create(&l->thread, NULL, tmu_loop_main, l), 0);
}

static inline void tmu_loop_stop(struct tmu_looper *l)
{
	atomic_store(&l->stop, true);
	pthread_join(l->thread, NULL);
}

struct tmu_call {
	atomic_int done;
	int status;
	uint32_t resp_size;
	uint8_t resp_first;
};

static inline void tmu_call_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	(void)rpc;
	struct tmu_call *c = tag;
	c->status = status;
	if (resp) {
		c->resp_size = resp->data_size;
		c->resp_first = resp->data_size ? resp->buf[0] : 0;
	}
	atomic_store(&c->done, 1);
}

/*
 * Sends one request of size bytes (all 0x5a) and runs the caller's event
 * loop until it completes. Returns the status; the request buffer is freed.
 */
static inline int tmu_call(struct rpc *rpc, int session, uint8_t type, uint32_t size,
			   struct tmu_call *c)
{
	memset(c, 0, sizeof(*c));
	rpc_lock(rpc);
	struct msgbuf *req = rpc_alloc_msg(rpc, size);
	cr_assert_not_null(req);
	memset(req->buf, 0x5a, size);
	int rc = rpc_enqueue_request(rpc, session, type, req, tmu_call_cont, c);
	rpc_unlock(rpc);
	if (rc < 0) {
		rpc_lock(rpc);
		rpc_free_msg(rpc, req);
		rpc_unlock(rpc);
		return rc;
	}
	while (!atomic_load(&c->done))
		tmu_turn(rpc);
	rpc_lock(rpc);
	rpc_free_msg(rpc, req);
	rpc_unlock(rpc);
	return c->status;
}

/* A forked server process: ECHO_REQ answered, HOLD_REQ held forever and
 * announced with one byte on `held`, until it is killed. */
struct tmu_server {
	pid_t pid;
	uint16_t port;
	int held;
};

static inline void tmu_hold(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	(void)rpc;
	(void)req;
	ssize_t n = write(*(int *)ctx, "h", 1); /* never answered */
	(void)n;
}

/* Fork before the caller has threads of its own. */
static inline struct tmu_server tmu_server_fork(const struct ferry_config *cfg)
{
	int pfd[2], efd[2];
	cr_assert_eq(pipe(pfd), 0);
	cr_assert_eq(pipe(efd), 0);
	struct tmu_server s = {.pid = fork()};
	cr_assert_geq(s.pid, 0);
	if (s.pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(pfd[0]);
		close(efd[0]);
		struct nexus *nx = tmu_nexus_with(cfg);
		uint16_t port = tmu_serve(nx);
		struct rpc *rpc = nexus_rpc(nx);
		int fd = efd[1];
		rpc_lock(rpc);
		rpc_register_handler(rpc, HOLD_REQ, tmu_hold, &fd);
		rpc_unlock(rpc);
		if (write(pfd[1], &port, sizeof(port)) != sizeof(port))
			_exit(1);
		for (;;)
			tmu_turn(rpc);
	}
	close(pfd[1]);
	close(efd[1]);
	cr_assert_eq(read(pfd[0], &s.port, sizeof(s.port)), (ssize_t)sizeof(s.port));
	close(pfd[0]);
	s.held = efd[0];
	return s;
}

/* Runs rpc's loop until the server holds n requests. */
static inline void tmu_wait_held(struct rpc *rpc, const struct tmu_server *s, int n)
{
	for (int got = 0; got < n;) {
		tmu_turn(rpc);
		char b[64];
		struct pollfd p = {.fd = s->held, .events = POLLIN};
		if (poll(&p, 1, 0) > 0) {
			ssize_t k = read(s->held, b, sizeof(b));
			got += k > 0 ? (int)k : 0;
		}
	}
}

static inline void tmu_server_kill(struct tmu_server *s)
{
	kill(s->pid, SIGKILL);
	int status;
	cr_assert_eq(waitpid(s->pid, &status, 0), s->pid);
	cr_assert(WIFSIGNALED(status));
	close(s->held);
}

#endif
