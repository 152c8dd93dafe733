/*
 * A packet lost after the process was idle is sent again. Idle for a while,
 * the progress thread sleeps without a timeout, leaving the nic's wake-ups
 * to the application; the application's own waits have no timer either. A
 * call that puts a request in flight (a write, or a read that reopens the
 * window) must have the thread tick for its retransmission timer. (postgres
 * under 5% loss: a backend's answer, lost, waited for a timer nobody ran,
 * and pgbench -i hung, 1 run in 20.)
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/sock.h"
#include "preload/stream_internal.h"
#include "preload/stream_wire.h"
#include "transport/rpc.h"
#include "transport/stats.h"
#include "preload_proc_util.h"

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	criterion_options.jobs = 1;
}

/* Well past the progress thread's idea of an application gone away (20 ms)
 * and past the return of the receive rings a burst left (RXBUF_TRIM_NS), so
 * it sleeps without a timeout by now. */
#define IDLE_US 1300000

static void pipe_put(int fd)
{
	cr_assert_eq(write(fd, "x", 1), 1);
}

static void pipe_take(int fd)
{
	char x;
	cr_assert_eq(read(fd, &x, 1), 1);
}

/* The client child: connects and says ping; once told, arms its endpoint to
 * lose the next packet to arrive, says so, and runs then(c); exits with its
 * result (0: all well), or 2-4 where the setup failed. */
static int client_losing_next(const struct sockaddr_in *a, int go, int armed, int (*then)(int c))
{
	alarm(8);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (const struct sockaddr *)a, sizeof(*a)) != 0 || write(c, "ping", 4) != 4)
		return 2;
	char b;
	if (read(go, &b, 1) != 1)
		return 3;
	ferry_lock();
	rpc_fault_drop_next(ferry.rpc, 1);
	ferry_unlock();
	if (write(armed, "x", 1) != 1)
		return 4;
	int rc = then(c);
	return rc ? rc : ferry_stats()->drop_fault == 1 ? 0 : 9;
}

struct idle_pair {
	int lis, srv;
	pid_t client;
};

/* A client child running client_losing_next(then), its connection
 * accepted and its ping read; then this process idles, and the client
 * loses the next packet to arrive. */
static void idle_pair_start(struct idle_pair *p, int (*then)(int c))
{
	env_udp();
	struct sockaddr_in a;
	p->lis = loopback_listener(&a);
	int go[2], armed[2];
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(armed), 0);
	p->client = fork();
	cr_assert_geq(p->client, 0);
	if (p->client == 0) {
		close(p->lis);
		_exit(client_losing_next(&a, go[0], armed[1], then));
	}
	p->srv = accept(p->lis, NULL, NULL);
	cr_assert_geq(p->srv, 0);
	char buf[16];
	cr_assert_eq(read(p->srv, buf, sizeof(buf)), 4);
	usleep(IDLE_US);
	pipe_put(go[1]);
	pipe_take(armed[0]);
}

static void idle_pair_end(struct idle_pair *p)
{
	int st;
	cr_assert_eq(waitpid(p->client, &st, 0), p->client);
	cr_assert(WIFEXITED(st), "the client was killed (signal %d): the lost packet never came again",
		  WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	cr_assert_eq(WEXITSTATUS(st), 0);
	close(p->srv);
	close(p->lis);
}

static int read_pong(int c)
{
	char buf[16];
	return read(c, buf, sizeof(buf)) == 4 && memcmp(buf, "pong", 4) == 0 ? 0 : 5;
}

/* The server answers after an idle spell and goes on without ferry
 * (waitpid): the write left its bytes for the progress thread to send, and
 * the answer, lost on arrival, must come again. */
Test(idle_loss, a_reply_lost_while_the_writer_is_away_comes_again, .timeout = 20)
{
	struct idle_pair p;
	idle_pair_start(&p, read_pong);
	uint64_t retx = ferry_stats()->retransmits;
	cr_assert_eq(write(p.srv, "pong", 4), 4);
	idle_pair_end(&p);
	cr_expect_gt(ferry_stats()->retransmits, retx);
}

/* Waits (outside ferry) until a request gets through, and says done. */
static int await_a_request(int c)
{
	uint64_t handled = ferry_stats()->requests_rx;
	while (ferry_stats()->requests_rx == handled)
		usleep(1000);
	return write(c, "done", 4) == 4 ? 0 : 5;
}

/*
 * A call that sends a control request at once (a read that reopens the
 * window sends a WINDOW so, where a write's bytes wait for the next wait),
 * made after an idle spell; the request is lost, the peer has nothing in
 * flight to bring it back, and the caller then sleeps in a read: only the
 * progress thread can send it again, and must be woken to.
 */
Test(idle_loss, a_control_request_lost_after_an_idle_spell_comes_again, .timeout = 20)
{
	struct idle_pair p;
	idle_pair_start(&p, await_a_request);
	struct ffile *f = sock_get(p.srv);
	cr_assert_not_null(f);
	struct fsock *sk = f->priv;
	ferry_lock();
	cr_assert_not_null(sk->stream);
	cr_assert_eq(stream_send_ctl(ferry.rpc, sk->stream, STREAM_REQ_WINDOW, sk->stream->rx.head,
				     stream_ctl_cont),
		     0);
	ferry_unlock();
	ffile_put(&fdtab, f);
	char buf[16];
	cr_assert_eq(read(p.srv, buf, sizeof(buf)), 4, "the request was never sent again");
	cr_assert_eq(memcmp(buf, "done", 4), 0);
	idle_pair_end(&p);
}
