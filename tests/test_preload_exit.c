/*
 * Bytes a process wrote before it left are delivered, then the end of the
 * stream, however it leaves: exit runs the drain as an exit handler, and
 * _exit and _Exit, which run none, drain too. The kernel keeps a closed
 * socket's buffer until the peer has it; inetd-style helpers and fork
 * children write their answer and _exit. The drain lets go of the endpoint
 * while it waits, so mgmt can end a dead peer's sessions meanwhile.
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mgmt/mgmt.h"
#include "preload/ferry.h"
#include "preload_proc_util.h"
#include "transport/rpc.h"
#include "transport/stats.h"

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	criterion_options.jobs = 1;
}

/* Within one stream window (256 KiB), so every write returns while the
 * reader reads nothing: the writer leaves with all of it unread. */
#define EXIT_BYTES (200u * 1024u)

enum leave { LEAVE_EXIT, LEAVE__EXIT, LEAVE__EXIT_C99 };

static unsigned char byte_at(size_t i)
{
	return (unsigned char)(i * 7u + 3u);
}

/* In the child: connects, writes EXIT_BYTES and leaves at once as asked,
 * closing nothing itself. */
static void write_and_leave(int lis, const struct sockaddr_in *a, enum leave how)
{
	alarm(20);
	/* Not this process's to serve; and exit's leak check (sanitizer
	 * builds) would count the copy as leaked. */
	close(lis);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (const struct sockaddr *)a, sizeof(*a)) != 0)
		_exit(2);
	static unsigned char buf[EXIT_BYTES];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = byte_at(i);
	for (size_t done = 0; done < sizeof(buf);) {
		ssize_t n = write(c, buf + done, sizeof(buf) - done);
		if (n <= 0)
			_exit(3);
		done += (size_t)n;
	}
	struct ferry_stats *st = ferry_stats();
	int code = st && st->streams_connected == 1 ? 0 : 4;
	switch (how) {
	case LEAVE_EXIT: exit(code);
	case LEAVE__EXIT: _exit(code);
	case LEAVE__EXIT_C99: _Exit(code);
	}
}

/* A listener on loopback in a process whose ferry runs over udp. */
static int udp_listener(struct sockaddr_in *a)
{
	env_udp();
	int lis = loopback_listener(a);
	cr_assert_eq(ferry_state(), FERRY_ON);
	return lis;
}

static void all_bytes_then_eof(enum leave how)
{
	struct sockaddr_in a;
	int lis = udp_listener(&a);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		write_and_leave(lis, &a, how);
	int s = accept(lis, NULL, NULL);
	cr_assert_geq(s, 0, "accept: %s", strerror(errno));
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the writer ended with %#x",
		  status);
	size_t got = 0;
	unsigned char b[8192];
	ssize_t n;
	while ((n = read(s, b, sizeof(b))) > 0) {
		for (ssize_t i = 0; i < n; i++)
			cr_assert_eq(b[i], byte_at(got + (size_t)i), "byte %zu", got + (size_t)i);
		got += (size_t)n;
	}
	cr_expect_eq(n, 0, "the stream ended with %s, not its end", strerror(errno));
	cr_expect_eq(got, EXIT_BYTES, "%zu of %u bytes arrived", got, EXIT_BYTES);
	close(s);
	close(lis);
}

Test(exit, bytes_written_before_exit_arrive_then_eof, .timeout = 30)
{
	all_bytes_then_eof(LEAVE_EXIT);
}

Test(exit, bytes_written_before__exit_arrive_then_eof, .timeout = 30)
{
	all_bytes_then_eof(LEAVE__EXIT);
}

Test(exit, bytes_written_before__Exit_arrive_then_eof, .timeout = 30)
{
	all_bytes_then_eof(LEAVE__EXIT_C99);
}

/* A connect still in its ferry handshake when the process leaves goes with
 * the process, as a kernel connect in SYN_SENT does: the exit drain calls
 * the handshake off (mgmt_forget_rpc, as here), and that is no fallback and
 * no kernel connect made on the way out. The server is stopped, so its
 * handshake cannot answer first. The connect is called off whether the
 * management thread has taken it up (held_queued false: it runs freely) or
 * it still waits in the thread's queue (held there by mgmt_hold). */
static pid_t stopped_server;

/* Runs however the test ends: a server left stopped outlives it otherwise. */
static void kill_stopped_server(void)
{
	if (stopped_server > 0) {
		kill(stopped_server, SIGKILL);
		waitpid(stopped_server, NULL, 0);
	}
}

static void called_off_connect(bool held_queued)
{
	env_udp();
	/* The handshake ends only by being called off. */
	setenv("FERRY_CONNECT_TIMEOUT_MS", "20000", 1);
	int ready[2];
	cr_assert_eq(pipe(ready), 0);
	int probe = socket(AF_INET, SOCK_STREAM, 0); /* starts this process's ferry */
	cr_assert_geq(probe, 0);
	close(probe);
	cr_assert_eq(ferry_state(), FERRY_ON);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(20);
		struct sockaddr_in a;
		int lis = loopback_listener(&a);
		(void)lis;
		if (write(ready[1], &a, sizeof(a)) != (ssize_t)sizeof(a))
			_exit(2);
		for (;;)
			pause();
	}
	struct sockaddr_in a;
	cr_assert_eq(read(ready[0], &a, sizeof(a)), (ssize_t)sizeof(a));
	stopped_server = pid;
	cr_assert_eq(kill(pid, SIGSTOP), 0);
	if (held_queued)
		mgmt_hold(ferry.mgmt);
	int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	cr_assert_geq(c, 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&a, sizeof(a)), -1);
	cr_assert_eq(errno, EINPROGRESS);
	uint64_t fell = ferry_stats()->fallbacks;
	mgmt_forget_rpc(ferry.mgmt, ferry.rpc);
	if (held_queued)
		mgmt_release(ferry.mgmt);
	struct pollfd p = {.fd = c, .events = POLLOUT};
	cr_assert_eq(poll(&p, 1, 10000), 1, "the called-off connect never ended");
	int err = 0;
	socklen_t el = sizeof(err);
	cr_assert_eq(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &el), 0);
	cr_expect_eq(err, ECONNABORTED, "SO_ERROR %s", strerror(err));
	cr_expect_eq(ferry_stats()->fallbacks, fell, "the called-off connect counted as a fallback");
	struct sockaddr_in peer;
	socklen_t pl = sizeof(peer);
	cr_expect_neq(getpeername(c, (struct sockaddr *)&peer, &pl), 0,
		      "the called-off connect reached the server through the kernel");
	close(c);
}

Test(exit, a_connect_in_its_handshake_at_exit_is_no_fallback, .timeout = 30,
     .fini = kill_stopped_server)
{
	called_off_connect(false);
}

Test(exit, a_connect_still_queued_at_exit_is_called_off_too, .timeout = 30,
     .fini = kill_stopped_server)
{
	called_off_connect(true);
}

static bool drain_done; /* atomic */

static void *drain_run(void *arg)
{
	(void)arg;
	ferry_exit_drain();
	__atomic_store_n(&drain_done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* The exit drain waits for its peers' answers with the endpoint let go
 * between its looks: mgmt resets the sessions of a peer it finds dead only
 * with the endpoint, and a drain that held it throughout waited out its
 * whole bound on such a peer (an inetd-style child that exited as its
 * client's FIN went out: every such client's exit took 2 s). The peer here
 * is stopped, so the drain has answers to wait for. */
Test(exit, the_drain_lets_go_of_the_endpoint_while_it_waits, .timeout = 30)
{
	struct sockaddr_in a;
	int lis = udp_listener(&a);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(20);
		int s = accept(lis, NULL, NULL);
		if (s < 0)
			_exit(2);
		for (;;)
			pause();
	}
	int c = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(c, 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
	cr_assert_eq(kill(pid, SIGSTOP), 0);
	static unsigned char buf[64 * 1024];
	cr_assert_eq(write(c, buf, sizeof(buf)), (ssize_t)sizeof(buf));

	/* The drain starts while this thread holds the endpoint, and takes it
	 * once let go. */
	rpc_lock(ferry.rpc);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, drain_run, NULL), 0);
	usleep(20 * 1000);
	rpc_unlock(ferry.rpc);
	usleep(20 * 1000);
	bool let_go = false;
	while (!let_go && !__atomic_load_n(&drain_done, __ATOMIC_ACQUIRE)) {
		if (rpc_trylock(ferry.rpc)) {
			let_go = !__atomic_load_n(&drain_done, __ATOMIC_ACQUIRE);
			rpc_unlock(ferry.rpc);
		}
		usleep(100);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_expect(let_go, "the endpoint was held until the drain ended");
	close(c);
	close(lis);
}
