/*
 * Scenarios: the less common calls an interposer must still get right:
 * zero-length I/O and error paths, SO_RCVTIMEO/SO_SNDTIMEO, sendmmsg/
 * recvmmsg and splice on a stream, a burst of connections, close_range,
 * sockets ferry must leave to the kernel (AF_UNIX, UDP), and new sockets
 * that show nothing of earlier ones.
 */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- edge_calls: zero-length I/O and calls on sockets in the wrong state ------ */

static void edge_server(struct peer *p)
{
	char buf[8];
	expect_rc(p, "read_listener", read(p->lfd, buf, sizeof(buf)), -1, ENOTCONN);
	expect_rc(p, "send_listener", send(p->lfd, "x", 1, MSG_NOSIGNAL), -1, EPIPE);
	expect_rc(p, "connect_listener", connect(p->lfd, (struct sockaddr *)&(struct sockaddr_in){
		.sin_family = AF_INET, .sin_port = htons(p->port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK)}, sizeof(struct sockaddr_in)), -1, EISCONN);
	int fd = tcp_accept(p, p->lfd);
	expect_rc(p, "listen_connected", listen(fd, 4), -1, EINVAL);
	expect_rc(p, "accept_connected", accept(fd, NULL, NULL), -1, EINVAL);
	expect_rc(p, "recv_zero", recv(fd, buf, 0, 0), 0, 0);
	expect_rc(p, "read_abc", read_full(fd, buf, 3), 3, 0);
	expect_rc(p, "eof", read(fd, buf, 1), 0, 0);
	close(fd);
}

static void edge_client(struct peer *p)
{
	char buf[8];
	int s = socket(AF_INET, SOCK_STREAM, 0);
	expect_rc(p, "send_unconnected", send(s, "x", 1, MSG_NOSIGNAL), -1, EPIPE);
	expect_rc(p, "recv_unconnected", recv(s, buf, 1, MSG_DONTWAIT), -1, ENOTCONN);
	expect_rc(p, "accept_unlistening", accept(s, NULL, NULL), -1, EINVAL);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	expect_rc(p, "bind", bind(s, (struct sockaddr *)&a, sizeof(a)), 0, 0);
	expect_rc(p, "bind_again", bind(s, (struct sockaddr *)&a, sizeof(a)), -1, EINVAL);
	/* Closed at a number nothing else is handed: ferry's own threads may
	 * open fds at any time, and a freed low number goes to the next open. */
	int high = dup2(s, 900);
	close(s);
	close(high);
	expect_rc(p, "send_closed_fd", send(high, "x", 1, MSG_NOSIGNAL), -1, EBADF);
	expect_rc(p, "unsupported_protocol", socket(AF_INET, SOCK_STREAM, IPPROTO_UDP), -1,
		  EPROTONOSUPPORT);
	int fd = tcp_connect(p, p->port);
	a.sin_port = htons(p->port);
	expect_rc(p, "connect_connected", connect(fd, (struct sockaddr *)&a, sizeof(a)), -1, EISCONN);
	expect_rc(p, "send_zero", send(fd, buf, 0, 0), 0, 0);
	expect_rc(p, "write_zero", write(fd, buf, 0), 0, 0);
	expect_rc(p, "send_more", send(fd, "a", 1, MSG_MORE), 1, 0);
	expect_rc(p, "send_rest", send(fd, "bc", 2, 0), 2, 0);
	close(fd);
}

/* ---- timeouts: SO_RCVTIMEO and SO_SNDTIMEO end blocking calls with EAGAIN --- */

static void timeo_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	sync_wait(p); /* not reading: the client's window fills */
	char *buf = malloc(1 << 20);
	while (read(fd, buf, 1 << 20) > 0)
		;
	free(buf);
	close(fd);
}

static void timeo_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	struct timeval tv = {.tv_sec = 0, .tv_usec = 200000}, got;
	socklen_t len = sizeof(got);
	expect_rc(p, "set_rcvtimeo", setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0, 0);
	getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &got, &len);
	expect_true(p, "get_rcvtimeo", got.tv_sec == 0 && got.tv_usec == 200000);
	char c;
	expect_rc(p, "recv_times_out", recv(fd, &c, 1, 0), -1, EAGAIN);
	expect_rc(p, "set_sndtimeo", setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0, 0);
	const size_t big = (size_t)64 << 20;
	char *buf = calloc(1, big);
	ssize_t w = send(fd, buf, big, 0);
	expect_true(p, "send_cut_short_by_timeout", w > 0 && (size_t)w < big);
	free(buf);
	sync_send(p);
	close(fd);
}

/* ---- mmsg_splice: sendmmsg/recvmmsg and splice on a stream --------------------- */

static void mmsg_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char buf[64] = {0};
	expect_rc(p, "read_mmsg", read_full(fd, buf, 9), 9, 0);
	expect_str(p, "mmsg_bytes", buf, "onetwosix");
	int pipefd[2];
	if (pipe(pipefd))
		die(p, "pipe");
	wait_for(fd, POLLIN);
	ssize_t n = 0;
	while (n < 7) {
		ssize_t r = splice(fd, NULL, pipefd[1], NULL, (size_t)(7 - n), 0);
		if (r <= 0)
			break;
		n += r;
	}
	expect_rc(p, "splice_to_pipe", n, 7, 0);
	memset(buf, 0, sizeof(buf));
	read_full(pipefd[0], buf, 7);
	expect_str(p, "spliced_bytes", buf, "spliced");
	/* And back: pipe to socket. */
	write(pipefd[1], "returned", 8);
	expect_rc(p, "splice_to_socket", splice(pipefd[0], NULL, fd, NULL, 8, 0), 8, 0);
	sync_wait(p);
	close(pipefd[0]);
	close(pipefd[1]);
	close(fd);
}

static void mmsg_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	struct iovec v[3] = {{"one", 3}, {"two", 3}, {"six", 3}};
	struct mmsghdr m[3];
	memset(m, 0, sizeof(m));
	for (int i = 0; i < 3; i++) {
		m[i].msg_hdr.msg_iov = &v[i];
		m[i].msg_hdr.msg_iovlen = 1;
	}
	expect_rc(p, "sendmmsg", sendmmsg(fd, m, 3, 0), 3, 0);
	expect_true(p, "sendmmsg_lens", m[0].msg_len == 3 && m[1].msg_len == 3 && m[2].msg_len == 3);
	int pipefd[2];
	if (pipe(pipefd))
		die(p, "pipe");
	write(pipefd[1], "spliced", 7);
	expect_rc(p, "splice_from_pipe", splice(pipefd[0], NULL, fd, NULL, 7, 0), 7, 0);
	char buf[16] = {0};
	struct iovec rv = {buf, sizeof(buf)};
	struct mmsghdr rm = {.msg_hdr = {.msg_iov = &rv, .msg_iovlen = 1}};
	wait_for(fd, POLLIN);
	int got = 0;
	size_t total = 0;
	while (total < 8) {
		rv = (struct iovec){buf + total, sizeof(buf) - total};
		int r = recvmmsg(fd, &rm, 1, 0, NULL);
		if (r <= 0)
			break;
		got += r;
		total += rm.msg_len;
	}
	expect_true(p, "recvmmsg", got >= 1 && total == 8);
	expect_str(p, "recvmmsg_bytes", buf, "returned");
	sync_send(p);
	close(pipefd[0]);
	close(pipefd[1]);
	close(fd);
}

/* ---- accept_burst: many connections at once, each its own stream --------------- */

enum { BURST = 48 };

static void burst_server(struct peer *p)
{
	int served = 0;
	for (int i = 0; i < BURST; i++) {
		int fd = tcp_accept(p, p->lfd);
		unsigned char id;
		if (read_full(fd, &id, 1) == 1) {
			id ^= 0xa5;
			if (send(fd, &id, 1, 0) == 1)
				served++;
		}
		close(fd);
	}
	expect_int(p, "served", served, BURST);
}

static void burst_client(struct peer *p)
{
	int fds[BURST];
	int sent = 0, right = 0;
	for (int i = 0; i < BURST; i++) {
		fds[i] = tcp_connect(p, p->port);
		unsigned char id = (unsigned char)i;
		sent += send(fds[i], &id, 1, 0) == 1;
	}
	for (int i = BURST - 1; i >= 0; i--) {
		unsigned char id;
		if (read_full(fds[i], &id, 1) == 1 && id == ((unsigned char)i ^ 0xa5))
			right++;
		close(fds[i]);
	}
	expect_int(p, "sent", sent, BURST);
	expect_int(p, "answers_matched", right, BURST);
}

/* ---- close_range: closing a range that holds a stream ends it ----------------- */

static void range_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char buf[4];
	expect_rc(p, "read", read_full(fd, buf, 2), 2, 0);
	expect_rc(p, "eof_after_close_range", read(fd, buf, 1), 0, 0);
	close(fd);
}

static void range_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int hi = dup2(fd, fd + 10);
	expect_rc(p, "send", send(fd, "cr", 2, 0), 2, 0);
	expect_rc(p, "close_range", close_range((unsigned)fd, (unsigned)hi, 0), 0, 0);
	expect_rc(p, "closed", fcntl(fd, F_GETFD), -1, EBADF);
	expect_rc(p, "closed_too", fcntl(hi, F_GETFD), -1, EBADF);
}

/* ---- kernel_sockets: AF_UNIX and UDP are the kernel's and keep working --------- */

static void kernel_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	sync_wait(p);
	close(fd);
}

static void kernel_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port); /* a ferry process from here on */
	int sv[2];
	expect_rc(p, "socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0, 0);
	char buf[16] = {0};
	expect_rc(p, "unix_send", send(sv[0], "unix", 4, 0), 4, 0);
	expect_rc(p, "unix_recv", recv(sv[1], buf, sizeof(buf), 0), 4, 0);
	int dom = -1;
	socklen_t len = sizeof(dom);
	getsockopt(sv[0], SOL_SOCKET, SO_DOMAIN, &dom, &len);
	expect_int(p, "unix_domain", dom, AF_UNIX);
	int u1 = socket(AF_INET, SOCK_DGRAM, 0), u2 = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	bind(u2, (struct sockaddr *)&a, sizeof(a));
	len = sizeof(a);
	getsockname(u2, (struct sockaddr *)&a, &len);
	expect_rc(p, "udp_sendto", sendto(u1, "datagram", 8, 0, (struct sockaddr *)&a, sizeof(a)), 8, 0);
	wait_for(u2, POLLIN);
	expect_rc(p, "udp_recv", recv(u2, buf, sizeof(buf), 0), 8, 0);
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN};
	epoll_ctl(ep, EPOLL_CTL_ADD, sv[1], &ev);
	send(sv[0], "again", 5, 0);
	struct timespec ts = {.tv_sec = 5};
	expect_rc(p, "epoll_pwait2_unix", epoll_pwait2(ep, &ev, 1, &ts, NULL), 1, 0);
	close(ep);
	close(u1);
	close(u2);
	close(sv[0]);
	close(sv[1]);
	sync_send(p);
	close(fd);
}

/* ---- fresh_sockets: every socket starts blank, whatever came before it -------
 * (ferry reuses the kernel sockets behind its own: nothing of an earlier
 * one may show, and each connection still has a port of its own). */

enum { FRESH_CONNS = 6 };

static int sockopt_int(int fd, int level, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);
	return getsockopt(fd, level, name, &v, &len) == 0 ? v : -1;
}

static uint16_t peer_port(struct peer *p, int fd)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	if (getpeername(fd, (struct sockaddr *)&a, &len))
		die(p, "getpeername");
	return ntohs(a.sin_port);
}

static void fresh_server(struct peer *p)
{
	int agree = 0, sndbuf_set = -1;
	for (int i = 0; i < FRESH_CONNS; i++) {
		int flags = (i & 1) ? SOCK_CLOEXEC : 0;
		if (i == 2)
			flags |= SOCK_NONBLOCK;
		int fd;
		while ((fd = accept4(p->lfd, NULL, NULL, flags)) < 0)
			if (errno != EINTR)
				die(p, "accept4");
		char key[32];
		snprintf(key, sizeof(key), "cloexec_%d", i);
		expect_int(p, key, fcntl(fd, F_GETFD), (i & 1) ? FD_CLOEXEC : 0);
		snprintf(key, sizeof(key), "nonblock_%d", i);
		expect_true(p, key, ((fcntl(fd, F_GETFL) & O_NONBLOCK) != 0) == (i == 2));
		set_nonblock(p, fd, false);
		if (i == 0) {
			int v = 12345;
			setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
			sndbuf_set = sockopt_int(fd, SOL_SOCKET, SO_SNDBUF);
			expect_int(p, "sndbuf_set", sndbuf_set, 2 * 12345);
		} else {
			snprintf(key, sizeof(key), "sndbuf_not_inherited_%d", i);
			expect_true(p, key, sockopt_int(fd, SOL_SOCKET, SO_SNDBUF) != sndbuf_set);
		}
		uint16_t port = 0;
		if (read_full(fd, &port, sizeof(port)) == sizeof(port) && port == peer_port(p, fd))
			agree++;
		send(fd, "k", 1, 0);
		close(fd);
	}
	expect_int(p, "peer_ports_agree", agree, FRESH_CONNS);
}

static int fresh_connect(struct peer *p, int fd)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p->port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	while (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		if (errno != EINTR)
			die(p, "connect");
	return fd;
}

/* Tells the server the port getsockname shows; waits for its answer. */
static void fresh_hello(struct peer *p, int fd, int via)
{
	uint16_t port = sock_port(p, fd);
	char k;
	if (send(via, &port, sizeof(port), 0) != sizeof(port) || read_full(via, &k, 1) != 1)
		die(p, "hello");
}

static void fresh_client(struct peer *p)
{
	/* Options and flags of a closed socket never reach a new one. */
	int u = socket(AF_INET, SOCK_STREAM, 0);
	int base = sockopt_int(u, SOL_SOCKET, SO_RCVBUF);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	expect_int(p, "cloexec_new", fcntl(s, F_GETFD), FD_CLOEXEC);
	expect_true(p, "nonblock_new", (fcntl(s, F_GETFL) & O_NONBLOCK) != 0);
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	expect_rc(p, "getsockname_new", getsockname(s, (struct sockaddr *)&a, &len), 0, 0);
	expect_true(p, "unbound_new", a.sin_port == 0 && a.sin_addr.s_addr == 0);
	int v = 4096;
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
	expect_int(p, "rcvbuf_set", sockopt_int(s, SOL_SOCKET, SO_RCVBUF), 2 * 4096);
	close(u);
	close(s);
	int t = socket(AF_INET, SOCK_STREAM, 0);
	expect_int(p, "rcvbuf_fresh", sockopt_int(t, SOL_SOCKET, SO_RCVBUF), base);
	expect_int(p, "cloexec_fresh", fcntl(t, F_GETFD), 0);
	expect_true(p, "blocking_fresh", (fcntl(t, F_GETFL) & O_NONBLOCK) == 0);
	close(t);

	uint16_t ports[FRESH_CONNS];
	for (int i = 0; i < FRESH_CONNS; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | ((i & 1) ? SOCK_CLOEXEC : 0), 0);
		int via = fd;
		if (i == 2)
			via = dup(fd); /* two numbers, one socket */
		if (i == 5) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		}
		fresh_connect(p, fd);
		char key[32];
		snprintf(key, sizeof(key), "cloexec_%d", i);
		expect_int(p, key, fcntl(fd, F_GETFD), (i & 1) ? FD_CLOEXEC : 0);
		ports[i] = sock_port(p, fd);
		if (i == 2)
			expect_true(p, "dup_same_port", sock_port(p, via) == ports[i]);
		if (i == 5)
			expect_int(p, "nodelay_before_connect", sockopt_int(fd, IPPROTO_TCP, TCP_NODELAY), 1);
		if (i == 3) {
			/* Two at once: each its own port. */
			int fd4 = fresh_connect(p, socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
			ports[4] = sock_port(p, fd4);
			expect_true(p, "ports_differ", ports[3] != ports[4]);
			fresh_hello(p, fd, fd);
			fresh_hello(p, fd4, fd4);
			close(fd4);
			close(fd);
			i++;
			continue;
		}
		fresh_hello(p, fd, via);
		if (via != fd)
			close(via);
		close(fd);
	}
	int nonzero = 0;
	for (int i = 0; i < FRESH_CONNS; i++)
		nonzero += ports[i] != 0;
	expect_int(p, "ports_nonzero", nonzero, FRESH_CONNS);
}

const struct scenario scen_misc[] = {
	{"edge_calls", edge_server, edge_client, false},
	{"timeouts", timeo_server, timeo_client, false},
	{"mmsg_splice", mmsg_server, mmsg_client, false},
	{"accept_burst", burst_server, burst_client, false},
	{"close_range", range_server, range_client, false},
	{"kernel_sockets", kernel_server, kernel_client, false},
	{"fresh_sockets", fresh_server, fresh_client, false},
	{NULL, NULL, NULL, false},
};
