/*
 * Liveness scenarios: a peer stopped for a while, killed, exiting with
 * connections open, restarted on its port. The kernel's answers are the
 * oracle; under ferry the failure timeout is its default (minutes), so a
 * wait here ends only because the peer's death was noticed, and the
 * harness's deadline catches a mechanism that does not work.
 */
#include "autoconfig.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Longer than any wait here may take when the mechanism works. */
enum { BLOCK_MS = 20000 };

/* Sends one byte, then waits for the client to be blocked on it and dies;
 * with unread set, first waits until the client's bytes are here (unread:
 * its kernel answers with a reset). */
static void die_after_hello(struct peer *p, bool unread)
{
	int fd = tcp_accept(p, p->lfd);
	expect_rc(p, "send", send(fd, "x", 1, 0), 1, 0);
	sync_wait(p);
	if (unread)
		expect_true(p, "client_bytes_here", wait_for(fd, POLLIN) & POLLIN);
	sleep_ms(100); /* the client is (very likely) blocked by now */
	fflush(stdout);
	raise(SIGKILL);
}

static void killed_server(struct peer *p)
{
	die_after_hello(p, false);
}

static void killed_unread_server(struct peer *p)
{
	die_after_hello(p, true);
}

/* Connects and takes the server's byte; with unread, leaves some of its own
 * at the server, unread. */
static int hello_client(struct peer *p, bool unread)
{
	int fd = tcp_connect(p, p->port);
	char c;
	expect_rc(p, "recv_hello", recv(fd, &c, 1, 0), 1, 0);
	if (unread)
		expect_rc(p, "send", send(fd, "abc", 3, 0), 3, 0);
	sync_send(p);
	return fd;
}

/* ---- killed_recv: a blocked recv returns EOF (the kernel sent FIN) ---- */

static void killed_recv_client(struct peer *p)
{
	int fd = hello_client(p, false);
	char c;
	expect_rc(p, "blocked_recv", recv(fd, &c, 1, 0), 0, 0);
	close(fd);
}

/* ---- killed_unread_recv: bytes left unread there: ECONNRESET ---------- */

static void killed_unread_recv_client(struct peer *p)
{
	int fd = hello_client(p, true);
	char c;
	expect_rc(p, "blocked_recv", recv(fd, &c, 1, 0), -1, ECONNRESET);
	close(fd);
}

/* ---- killed_poll: a blocked poll wakes readable, then EOF --------------- */

static void killed_poll_client(struct peer *p)
{
	int fd = hello_client(p, false);
	struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};
	expect_rc(p, "poll", poll(&pfd, 1, BLOCK_MS), 1, 0);
	expect_int(p, "revents", pfd.revents, POLLIN | POLLRDHUP);
	char c;
	expect_rc(p, "recv", recv(fd, &c, 1, 0), 0, 0);
	/* The dead peer's socket is gone: the write still leaves, and the
	 * reset it draws breaks the pipe. */
	expect_rc(p, "first send", send(fd, "x", 1, MSG_NOSIGNAL), 1, 0);
	pfd.events = POLLOUT;
	expect_rc(p, "poll after", poll(&pfd, 1, BLOCK_MS), 1, 0);
	expect_int(p, "revents after", pfd.revents & (POLLERR | POLLHUP), POLLERR | POLLHUP);
	expect_rc(p, "second send", send(fd, "x", 1, MSG_NOSIGNAL), -1, EPIPE);
	close(fd);
}

/* ---- killed_unread_epoll: a blocked epoll_wait wakes with the reset ----- */

static void killed_unread_epoll_client(struct peer *p)
{
	int fd = hello_client(p, true);
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = fd};
	expect_rc(p, "epoll_ctl", epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0, 0);
	struct epoll_event out;
	expect_rc(p, "epoll_wait", ep_wait(ep, &out, 1, BLOCK_MS), 1, 0);
	expect_int(p, "events", out.events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP),
		   EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP);
	char c;
	expect_rc(p, "recv", recv(fd, &c, 1, 0), -1, ECONNRESET);
	close(ep);
	close(fd);
}

/* ---- exit_open: exit() with a connection open: the client reads EOF ---- */

static void exit_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	expect_rc(p, "send", send(fd, "x", 1, 0), 1, 0);
	sync_wait(p);
	sleep_ms(100);
	fflush(stdout);
	exit(p->failures ? 1 : 0); /* fd still open: exit closes it */
}

/* ---- stopped: a server stopped for 10 s answers afterwards, same bytes -- */

static void stopped_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	pid_t self = getpid();
	sync_send_data(p, &self, sizeof(self));
	unsigned char buf[4096];
	ssize_t n;
	size_t total = 0;
	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
		total += write_all(p, fd, buf, (size_t)n);
	expect_rc(p, "eof", n, 0, 0);
	expect_int(p, "echoed", (long)total, 64 * 1024);
	close(fd);
}

static void stopped_client(struct peer *p)
{
	enum { LEN = 64 * 1024, STOP_MS = 10000 };
	int fd = tcp_connect(p, p->port);
	pid_t server;
	sync_recv_data(p, &server, sizeof(server));
	unsigned char *out = malloc(LEN), *in = malloc(LEN);
	if (!out || !in)
		die(p, "malloc");
	pattern_fill(out, LEN, 0);
	expect_rc(p, "stop", kill(server, SIGSTOP), 0, 0);
	/* Written while it is stopped: waits, within the window, then flows. */
	expect_int(p, "written_while_stopped", (long)write_all(p, fd, out, LEN), LEN);
	sleep_ms(STOP_MS);
	expect_rc(p, "cont", kill(server, SIGCONT), 0, 0);
	expect_int(p, "echoed", (long)read_full(fd, in, LEN), LEN);
	expect_true(p, "same_bytes", memcmp(in, out, LEN) == 0);
	expect_rc(p, "shutdown", shutdown(fd, SHUT_WR), 0, 0);
	char c;
	expect_rc(p, "eof", recv(fd, &c, 1, 0), 0, 0);
	free(out);
	free(in);
	close(fd);
}

/* ---- restarted: a server killed and started again on its port ---------- */

/* Echoes one byte on one connection accepted on port. */
static void echo_once(struct peer *p, uint16_t port)
{
	int lfd = tcp_listener(p, port, 8);
	sync_send(p);
	int fd = tcp_accept(p, lfd);
	char c;
	expect_rc(p, "recv", recv(fd, &c, 1, 0), 1, 0);
	expect_rc(p, "send", send(fd, &c, 1, 0), 1, 0);
	sync_wait(p);
	close(fd);
	close(lfd);
}

static void restarted_server(struct peer *p)
{
	close(p->lfd);
	p->lfd = -1;
	fflush(stdout);
	pid_t first = fork();
	if (first < 0)
		die(p, "fork");
	if (first == 0) {
		/* The first incarnation: answers once, then is killed with
		 * the connection open. */
		int lfd = tcp_listener(p, p->port, 8);
		sync_send(p);
		int fd = tcp_accept(p, lfd);
		char c;
		if (recv(fd, &c, 1, 0) != 1 || send(fd, &c, 1, 0) != 1)
			_exit(1);
		sync_wait(p);
		raise(SIGKILL);
	}
	int st;
	while (waitpid(first, &st, 0) < 0 && errno == EINTR)
		;
	expect_true(p, "first_killed", WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	echo_once(p, p->port);
}

static void restarted_client(struct peer *p)
{
	for (int round = 0; round < 2; round++) {
		sync_wait(p); /* listening */
		int fd = tcp_connect(p, p->port);
		char c = (char)('a' + round);
		expect_rc(p, "send", send(fd, &c, 1, 0), 1, 0);
		expect_rc(p, "echo", recv(fd, &c, 1, 0), 1, 0);
		expect_int(p, "byte", c, 'a' + round);
		sync_send(p);
		if (round == 0) {
			/* The first server is gone: EOF, as its kernel closed it. */
			expect_rc(p, "eof", recv(fd, &c, 1, 0), 0, 0);
		}
		close(fd);
	}
}

const struct scenario scen_liveness[] = {
	{"killed_recv", killed_server, killed_recv_client, true},
	{"killed_unread_recv", killed_unread_server, killed_unread_recv_client, true},
	{"killed_poll", killed_server, killed_poll_client, true},
	{"killed_unread_epoll", killed_unread_server, killed_unread_epoll_client, true},
	{"exit_open", exit_server, killed_recv_client, false},
	{"stopped", stopped_server, stopped_client, false},
	{"restarted", restarted_server, restarted_client, false},
	{NULL, NULL, NULL, false},
};
