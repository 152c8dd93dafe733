/* Scenarios: the byte stream itself: blocking and non-blocking I/O, flags, iovecs, EOF, errors. */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

enum { MB = 1 << 20 };

static unsigned char *xmalloc(struct peer *p, size_t n)
{
	unsigned char *b = malloc(n);
	if (!b)
		die(p, "malloc");
	return b;
}

/* ---- blocking_echo: 1 MB each way, blocking calls, then EOF ---------------------- */

static void echo_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	unsigned char *buf = xmalloc(p, MB);
	expect_int(p, "received", (long)read_full(fd, buf, MB), MB);
	expect_true(p, "pattern", pattern_check(buf, MB, 0));
	expect_int(p, "echoed", (long)write_all(p, fd, buf, MB), MB);
	char c;
	expect_rc(p, "read_after_peer_close", read(fd, &c, 1), 0, 0);
	close(fd);
	free(buf);
}

static void echo_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	unsigned char *buf = xmalloc(p, MB);
	pattern_fill(buf, MB, 0);
	expect_int(p, "sent", (long)write_all(p, fd, buf, MB), MB);
	memset(buf, 0, MB);
	expect_int(p, "echo_received", (long)read_full(fd, buf, MB), MB);
	expect_true(p, "echo_pattern", pattern_check(buf, MB, 0));
	close(fd);
	free(buf);
}

/* ---- nonblocking_connect: EINPROGRESS, POLLOUT, SO_ERROR, EAGAIN, EISCONN ------- */

static void nbconn_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	sync_wait(p);
	expect_rc(p, "send_hello", send(fd, "hello", 5, 0), 5, 0);
	sync_wait(p);
	close(fd);
}

static void nbconn_client(struct peer *p)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		die(p, "socket");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p->port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	expect_rc(p, "connect", connect(fd, (struct sockaddr *)&a, sizeof(a)), -1, EINPROGRESS);
	short ev = wait_for(fd, POLLOUT);
	expect_true(p, "pollout", (ev & POLLOUT) && !(ev & (POLLERR | POLLHUP)));
	int err = -1;
	socklen_t len = sizeof(err);
	expect_rc(p, "getsockopt_so_error", getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len), 0, 0);
	expect_int(p, "so_error", err, 0);
	/* Linux reports the completed connect once more as success, then EISCONN. */
	expect_rc(p, "connect_again", connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, 0);
	expect_rc(p, "connect_third", connect(fd, (struct sockaddr *)&a, sizeof(a)), -1, EISCONN);
	char buf[16];
	expect_rc(p, "recv_empty", recv(fd, buf, sizeof(buf), 0), -1, EAGAIN);
	expect_rc(p, "read_empty", read(fd, buf, sizeof(buf)), -1, EAGAIN);
	sync_send(p);
	expect_true(p, "pollin", wait_for(fd, POLLIN) & POLLIN);
	expect_rc(p, "recv_hello", recv(fd, buf, sizeof(buf), 0), 5, 0);
	expect_rc(p, "recv_drained", recv(fd, buf, sizeof(buf), 0), -1, EAGAIN);
	sync_send(p);
	close(fd);
}

/* ---- connect_refused: no listener: EINPROGRESS then SO_ERROR, blocking refused --- */

static void refused_server(struct peer *p)
{
	sync_wait(p);
}

static void refused_client(struct peer *p)
{
	/* A bound, never-listening socket holds a port nobody accepts on. */
	int hold = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (hold < 0 || bind(hold, (struct sockaddr *)&a, sizeof(a)))
		die(p, "bind holder");
	a.sin_port = htons(sock_port(p, hold));

	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
	expect_rc(p, "nb_connect", rc, -1, EINPROGRESS);
	short ev = wait_for(fd, POLLOUT);
	expect_true(p, "pollerr", ev & POLLERR);
	int err = 0;
	socklen_t len = sizeof(err);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
	expect_int(p, "so_error", err, ECONNREFUSED);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
	expect_int(p, "so_error_cleared", err, 0);
	close(fd);

	fd = socket(AF_INET, SOCK_STREAM, 0);
	expect_rc(p, "blocking_connect", connect(fd, (struct sockaddr *)&a, sizeof(a)), -1,
		  ECONNREFUSED);
	close(fd);
	close(hold);
	sync_send(p);
}

/* ---- window_full: EAGAIN when the peer does not read, partial writes ------------- */

static void window_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	size_t total[2];
	unsigned char *buf = xmalloc(p, MB);
	size_t offset = 0;
	for (int round = 0; round < 2; round++) {
		sync_recv_data(p, &total[round], sizeof(total[round]));
		bool good = true;
		size_t got = 0;
		while (got < total[round]) {
			size_t want = total[round] - got < MB ? total[round] - got : MB;
			size_t n = read_full(fd, buf, want);
			if (n != want)
				break;
			good = good && pattern_check(buf, n, offset);
			got += n;
			offset += n;
		}
		expect_true(p, round ? "partial_bytes_all_arrived" : "queued_bytes_all_arrived",
			    got == total[round]);
		expect_true(p, round ? "partial_pattern" : "queued_pattern", good);
		sync_send(p);
	}
	free(buf);
	sync_wait(p);
	close(fd);
}

static void window_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	set_nonblock(p, fd, true);
	enum { CHUNK = 64 * 1024 };
	const size_t limit = (size_t)512 * MB;
	unsigned char *chunk = xmalloc(p, CHUNK);
	size_t sent = 0;
	int last_errno = 0;
	while (sent < limit) {
		pattern_fill(chunk, CHUNK, sent);
		ssize_t w = send(fd, chunk, CHUNK, 0);
		if (w < 0) {
			last_errno = errno;
			break;
		}
		sent += (size_t)w;
	}
	expect_true(p, "filled_some", sent > 0);
	expect_true(p, "eagain_when_full", last_errno == EAGAIN);
	expect_rc(p, "send_again", send(fd, chunk, 1, 0), -1, EAGAIN);
	struct pollfd pfd = {.fd = fd, .events = POLLOUT};
	expect_rc(p, "poll_not_writable", poll(&pfd, 1, 0), 0, 0);
	sync_send_data(p, &sent, sizeof(sent));
	sync_wait(p);

	/* The peer drained everything: one big non-blocking send is cut short. */
	expect_true(p, "writable_after_drain", wait_for(fd, POLLOUT) & POLLOUT);
	const size_t big = (size_t)64 * MB;
	unsigned char *buf = xmalloc(p, big);
	pattern_fill(buf, big, sent);
	ssize_t w = send(fd, buf, big, 0);
	expect_true(p, "partial_write", w > 0 && (size_t)w < big);
	size_t part = w > 0 ? (size_t)w : 0;
	sync_send_data(p, &part, sizeof(part));
	sync_wait(p);
	sync_send(p);
	free(buf);
	free(chunk);
	close(fd);
}

/* ---- blocking_large_write: a blocking send waits for room and sends it all ------- */

static void bigwrite_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	const size_t total = (size_t)16 * MB;
	unsigned char *buf = xmalloc(p, MB);
	size_t got = 0;
	bool good = true;
	sleep_ms(100); /* let the writer block on a full window first */
	while (got < total) {
		size_t n = read_full(fd, buf, MB);
		if (n == 0)
			break;
		good = good && pattern_check(buf, n, got);
		got += n;
	}
	expect_int(p, "received", (long)got, (long)total);
	expect_true(p, "pattern", good);
	free(buf);
	close(fd);
}

static void bigwrite_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	const size_t total = (size_t)16 * MB;
	unsigned char *buf = xmalloc(p, total);
	pattern_fill(buf, total, 0);
	expect_rc(p, "send_16mb", send(fd, buf, total, 0), (long)total, 0);
	free(buf);
	close(fd);
}

/* ---- msg_flags: MSG_PEEK, MSG_DONTWAIT, MSG_WAITALL -------------------------------- */

static void flags_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	unsigned char buf[300];
	pattern_fill(buf, sizeof(buf), 0);
	expect_rc(p, "send_digits", send(fd, "0123456789", 10, 0), 10, 0);
	sync_wait(p);
	/* One short piece: a plain recv returns it without waiting for more. */
	send(fd, buf, 100, 0);
	sync_send(p);
	sync_wait(p);
	/* Three pieces with gaps: MSG_WAITALL must gather them. */
	for (int i = 0; i < 3; i++) {
		send(fd, buf + 100 * i, 100, 0);
		sleep_ms(30);
	}
	sync_wait(p);
	send(fd, buf, 50, 0);
	close(fd);
}

static void flags_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	char buf[400];
	wait_for(fd, POLLIN);
	expect_rc(p, "peek4", recv(fd, buf, 4, MSG_PEEK), 4, 0);
	expect_true(p, "peek_bytes", !memcmp(buf, "0123", 4));
	expect_rc(p, "peek_again", recv(fd, buf, 4, MSG_PEEK | MSG_DONTWAIT), 4, 0);
	expect_rc(p, "read10", read_full(fd, buf, 10), 10, 0);
	expect_true(p, "read_bytes", !memcmp(buf, "0123456789", 10));
	expect_rc(p, "dontwait_empty", recv(fd, buf, sizeof(buf), MSG_DONTWAIT), -1, EAGAIN);
	expect_rc(p, "peek_dontwait_empty", recv(fd, buf, 1, MSG_PEEK | MSG_DONTWAIT), -1, EAGAIN);
	int fl = fcntl(fd, F_GETFL);
	expect_int(p, "still_blocking", fl & O_NONBLOCK, 0);
	sync_send(p);
	sync_wait(p);
	ssize_t n = recv(fd, buf, 300, 0);
	expect_true(p, "short_read", n > 0 && n <= 100);
	if (n > 0 && n < 100)
		read_full(fd, buf + n, (size_t)(100 - n));
	sync_send(p);
	n = recv(fd, buf, 300, MSG_WAITALL);
	expect_rc(p, "waitall", n, 300, 0);
	expect_true(p, "waitall_pattern", pattern_check((unsigned char *)buf, 300, 0));
	sync_send(p);
	expect_rc(p, "waitall_until_eof", recv(fd, buf, 100, MSG_WAITALL), 50, 0);
	expect_rc(p, "eof", recv(fd, buf, 100, 0), 0, 0);
	expect_rc(p, "eof_again", recv(fd, buf, 100, MSG_DONTWAIT), 0, 0);
	close(fd);
}

/* ---- iovecs: writev/readv, sendmsg/recvmsg with many vectors ------------------- */

static void iov_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	enum { TOTAL = 5050 + 3500 };
	static unsigned char buf[TOTAL];
	/* 1024 vectors of 9 bytes, some empty. */
	struct iovec iov[1024];
	size_t got = 0;
	while (got < 5050) {
		size_t cap = 0;
		int n = 0;
		for (; n < 1024 && cap < 5050 - got; n++) {
			size_t l = n % 7 == 3 ? 0 : 9;
			if (l > 5050 - got - cap)
				l = 5050 - got - cap;
			iov[n] = (struct iovec){.iov_base = buf + got + cap, .iov_len = l};
			cap += l;
		}
		ssize_t r = readv(fd, iov, n);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	expect_int(p, "readv_total", (long)got, 5050);
	while (got < TOTAL) {
		struct iovec v[64];
		size_t left = TOTAL - got, cap = 0;
		int n = 0;
		for (; n < 64 && cap < left; n++) {
			size_t l = left - cap < 13 ? left - cap : 13;
			v[n] = (struct iovec){.iov_base = buf + got + cap, .iov_len = l};
			cap += l;
		}
		struct sockaddr_storage from;
		struct msghdr m = {.msg_name = &from, .msg_namelen = sizeof(from),
				   .msg_iov = v, .msg_iovlen = (size_t)n};
		ssize_t r = recvmsg(fd, &m, 0);
		if (r <= 0)
			break;
		if (got == 5050) {
			expect_int(p, "recvmsg_namelen", m.msg_namelen, 0);
			expect_int(p, "recvmsg_flags", m.msg_flags, 0);
		}
		got += (size_t)r;
	}
	expect_int(p, "recvmsg_total", (long)got, TOTAL);
	expect_true(p, "pattern", pattern_check(buf, TOTAL, 0));
	char c;
	expect_rc(p, "eof", read(fd, &c, 1), 0, 0);
	close(fd);
}

static void iov_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	static unsigned char buf[5050 + 3500];
	pattern_fill(buf, sizeof(buf), 0);
	struct iovec iov[IOV_MAX + 1];
	size_t off = 0;
	for (int i = 0; i < 100; i++) {
		iov[i] = (struct iovec){.iov_base = buf + off, .iov_len = (size_t)i + 1};
		off += (size_t)i + 1;
	}
	expect_rc(p, "writev_100", writev(fd, iov, 100), 5050, 0);
	for (int i = 0; i < 500; i++)
		iov[i] = (struct iovec){.iov_base = buf + 5050 + 7 * i, .iov_len = 7};
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = 500};
	expect_rc(p, "sendmsg_500", sendmsg(fd, &m, 0), 3500, 0);
	for (int i = 0; i <= IOV_MAX; i++)
		iov[i] = (struct iovec){.iov_base = buf, .iov_len = 1};
	expect_rc(p, "writev_too_many", writev(fd, iov, IOV_MAX + 1), -1, EINVAL);
	m.msg_iovlen = IOV_MAX + 1;
	expect_rc(p, "sendmsg_too_many", sendmsg(fd, &m, 0), -1, EMSGSIZE);
	expect_rc(p, "writev_none", writev(fd, iov, 0), 0, 0);
	close(fd);
}

/* ---- shutdown_wr: EOF at the peer while the other direction still flows -------- */

static void shut_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char req[16];
	expect_rc(p, "read_request", read_full(fd, req, 7), 7, 0);
	expect_rc(p, "read_eof", read(fd, req, sizeof(req)), 0, 0);
	short ev = wait_for(fd, POLLIN | POLLRDHUP);
	expect_true(p, "pollrdhup", (ev & POLLRDHUP) && (ev & POLLIN) && !(ev & POLLHUP));
	enum { REPLY = 200 * 1024 };
	unsigned char *buf = malloc(REPLY);
	pattern_fill(buf, REPLY, 0);
	expect_int(p, "reply_sent", (long)write_all(p, fd, buf, REPLY), REPLY);
	free(buf);
	close(fd);
}

static void shut_client(struct peer *p)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	expect_rc(p, "shutdown_unconnected", shutdown(fd, SHUT_WR), -1, ENOTCONN);
	close(fd);
	fd = tcp_connect(p, p->port);
	expect_rc(p, "send_request", send(fd, "request", 7, 0), 7, 0);
	expect_rc(p, "shutdown_wr", shutdown(fd, SHUT_WR), 0, 0);
	expect_rc(p, "send_after_shutdown", send(fd, "x", 1, MSG_NOSIGNAL), -1, EPIPE);
	enum { REPLY = 200 * 1024 };
	unsigned char *buf = malloc(REPLY);
	expect_int(p, "reply_received", (long)read_full(fd, buf, REPLY), REPLY);
	expect_true(p, "reply_pattern", pattern_check(buf, REPLY, 0));
	expect_rc(p, "eof", read(fd, buf, 1), 0, 0);
	free(buf);
	close(fd);
}

/* ---- close_unread: closing with unread data resets the connection -------------- */

static void unread_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char buf[10];
	expect_rc(p, "read_part", read_full(fd, buf, 10), 10, 0);
	/* Wait until everything is here, then close with 990 bytes unread. */
	sync_wait(p);
	int avail = 0;
	for (int i = 0; i < 500; i++) {
		if (recv(fd, (char[1000]){0}, 1000, MSG_PEEK | MSG_DONTWAIT) == 990) {
			avail = 1;
			break;
		}
		sleep_ms(10);
	}
	expect_true(p, "unread_pending", avail);
	close(fd);
	sync_send(p);
}

static void unread_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	char buf[1000];
	memset(buf, 'u', sizeof(buf));
	expect_rc(p, "send", send(fd, buf, sizeof(buf), 0), 1000, 0);
	sync_send(p);
	sync_wait(p);
	expect_rc(p, "recv_after_reset", recv(fd, buf, sizeof(buf), 0), -1, ECONNRESET);
	expect_rc(p, "recv_after_error", recv(fd, buf, sizeof(buf), 0), 0, 0);
	expect_rc(p, "send_after_reset", send(fd, buf, 1, MSG_NOSIGNAL), -1, EPIPE);
	close(fd);
}

/* ---- write_after_peer_close: a write to a peer that closed is reset, and the
 * reset of a socket that had the peer's FIN (CLOSE_WAIT) reads as EOF and
 * reports EPIPE, not ECONNRESET (tcp_reset; SOCK_DONE comes first in
 * tcp_recvmsg) ----------------------------------------------------------------- */

static void wpc_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	expect_rc(p, "send", send(fd, "hi", 2, 0), 2, 0);
	expect_rc(p, "close", close(fd), 0, 0);
	sync_send(p);
	sync_wait(p);
}

static void wpc_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	sync_wait(p);
	short ev = wait_for(fd, POLLRDHUP);
	expect_int(p, "fin_comes", ev, POLLRDHUP);
	expect_rc(p, "send_after_fin", send(fd, "x", 1, MSG_NOSIGNAL), 1, 0);
	/* Events 0: poll returns once POLLERR or POLLHUP is there (the reset). */
	expect_int(p, "reset_comes", wait_for(fd, 0), POLLERR | POLLHUP);
	struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLOUT | POLLRDHUP};
	expect_rc(p, "poll_reset", poll(&pfd, 1, 0), 1, 0);
	expect_int(p, "poll_reset_events", pfd.revents,
		   POLLIN | POLLOUT | POLLRDHUP | POLLERR | POLLHUP);
	char buf[8];
	expect_rc(p, "recv_data", recv(fd, buf, sizeof(buf), 0), 2, 0);
	expect_rc(p, "recv_eof", recv(fd, buf, sizeof(buf), 0), 0, 0);
	expect_rc(p, "recv_eof_again", recv(fd, buf, sizeof(buf), 0), 0, 0);
	int err = -1;
	socklen_t len = sizeof(err);
	expect_rc(p, "getsockopt", getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len), 0, 0);
	expect_int(p, "so_error", err, EPIPE);
	expect_rc(p, "send_after_reset", send(fd, "x", 1, MSG_NOSIGNAL), -1, EPIPE);
	sync_send(p);
	close(fd);
}

/* ---- unconnected_poll: a socket neither connected nor listening polls writable
 * and hung up (tcp_poll, TCP_CLOSE); shut for reading (which says ENOTCONN but
 * sets the flag), it is readable at EOF too ------------------------------------- */

static void unconn_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char c;
	expect_rc(p, "recv", recv(fd, &c, 1, 0), 1, 0);
	close(fd);
}

static short poll_now(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLOUT | POLLRDHUP};
	return poll(&pfd, 1, 0) == 1 ? pfd.revents : 0;
}

static void unconn_client(struct peer *p)
{
	int a = socket(AF_INET, SOCK_STREAM, 0);
	expect_int(p, "fresh", poll_now(a), POLLOUT | POLLHUP);
	expect_rc(p, "shut_wr", shutdown(a, SHUT_WR), -1, ENOTCONN);
	expect_int(p, "after_shut_wr", poll_now(a), POLLOUT | POLLHUP);
	expect_rc(p, "shut_rd", shutdown(a, SHUT_RD), -1, ENOTCONN);
	expect_int(p, "after_shut_rd", poll_now(a), POLLIN | POLLOUT | POLLHUP | POLLRDHUP);
	char c;
	expect_rc(p, "recv_after_shut_rd", recv(a, &c, 1, MSG_DONTWAIT), 0, 0);
	close(a);
	int b = socket(AF_INET, SOCK_STREAM, 0);
	expect_rc(p, "shut_rdwr", shutdown(b, SHUT_RDWR), -1, ENOTCONN);
	expect_int(p, "after_shut_rdwr", poll_now(b), POLLIN | POLLOUT | POLLHUP | POLLRDHUP);
	close(b);
	int fd = tcp_connect(p, p->port);
	expect_rc(p, "send", send(fd, "x", 1, 0), 1, 0);
	close(fd);
}

/* ---- reset_linger0: RST by SO_LINGER 0, then EPIPE and SIGPIPE -------------------- */

static volatile sig_atomic_t sigpipes;
static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

static void reset_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	struct linger l = {.l_onoff = 1, .l_linger = 0};
	expect_rc(p, "so_linger", setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0, 0);
	sync_wait(p);
	close(fd);
	sync_send(p);
}

static void reset_client(struct peer *p)
{
	struct sigaction sa = {.sa_handler = on_sigpipe};
	sigaction(SIGPIPE, &sa, NULL);
	int fd = tcp_connect(p, p->port);
	sync_send(p);
	sync_wait(p);
	char buf[16];
	expect_rc(p, "recv", recv(fd, buf, sizeof(buf), 0), -1, ECONNRESET);
	int err = -1;
	socklen_t len = sizeof(err);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
	expect_int(p, "so_error_after_reported", err, 0);
	expect_rc(p, "send_nosignal", send(fd, "x", 1, MSG_NOSIGNAL), -1, EPIPE);
	expect_int(p, "sigpipes_suppressed", sigpipes, 0);
	expect_rc(p, "send", send(fd, "x", 1, 0), -1, EPIPE);
	expect_int(p, "sigpipes", sigpipes, 1);
	expect_rc(p, "write", write(fd, "x", 1), -1, EPIPE);
	expect_int(p, "sigpipes_write", sigpipes, 2);
	close(fd);
}

/* ---- peer_killed: the server process dies: EOF or reset, then write errors ------ */

static void killed_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	expect_rc(p, "send", send(fd, "x", 1, 0), 1, 0);
	sync_wait(p);
	fflush(stdout);
	raise(SIGKILL);
}

static void killed_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	char c;
	expect_rc(p, "recv", recv(fd, &c, 1, 0), 1, 0);
	sync_send(p);
	/*
	 * The kernel closes a killed process's sockets (FIN: EOF here); ferry
	 * cannot send anything for a dead process and reports ECONNRESET once
	 * the peer is declared dead. Both end the stream; neither hangs.
	 */
	ssize_t r = recv(fd, &c, 1, 0);
	expect_true(p, "read_ends", r == 0 || (r < 0 && errno == ECONNRESET));
	int err = 0;
	for (int i = 0; i < 400 && !err; i++) {
		if (send(fd, "y", 1, MSG_NOSIGNAL) < 0)
			err = errno;
		else
			sleep_ms(10);
	}
	expect_true(p, "write_fails", err == EPIPE || err == ECONNRESET);
	close(fd);
}

/* ---- eof_wakes_reader: a reader blocked in recv wakes with 0 at close ------------ */

static void wake_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	sync_wait(p);
	sleep_ms(100); /* the client is (very likely) blocked in recv by now */
	close(fd);
}

static void wake_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	sync_send(p);
	char c;
	expect_rc(p, "blocked_recv", recv(fd, &c, 1, 0), 0, 0);
	close(fd);
}

/* ---- close_after_send: close right after a send still delivers it all, then EOF -- */

static void closesend_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	enum { LEN = 256 * 1024 };
	unsigned char *buf = xmalloc(p, LEN);
	pattern_fill(buf, LEN, 0);
	expect_int(p, "sent", (long)write_all(p, fd, buf, LEN), LEN);
	expect_rc(p, "close", close(fd), 0, 0);
	free(buf);
}

static void closesend_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	enum { LEN = 256 * 1024 };
	unsigned char *buf = xmalloc(p, LEN);
	sleep_ms(100); /* the server has closed by now (very likely) */
	expect_int(p, "received", (long)read_full(fd, buf, LEN), LEN);
	expect_true(p, "pattern", pattern_check(buf, LEN, 0));
	expect_rc(p, "eof", read(fd, buf, 1), 0, 0);
	free(buf);
	close(fd);
}

/* ---- arrives_while_idle: data that came while the app slept is there for MSG_DONTWAIT */

static void idle_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	expect_rc(p, "send", send(fd, "hello", 5, 0), 5, 0);
	sync_wait(p);
	close(fd);
}

static void idle_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	char buf[8];
	/* No ferry call for a while: only a background thread can take the data in. */
	sleep_ms(1000);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	expect_rc(p, "poll_now", poll(&pfd, 1, 0), 1, 0);
	expect_rc(p, "recv_dontwait", recv(fd, buf, sizeof(buf), MSG_DONTWAIT), 5, 0);
	sync_send(p);
	close(fd);
}

const struct scenario scen_stream[] = {
	{"arrives_while_idle", idle_server, idle_client, false},
	{"close_after_send", closesend_server, closesend_client, false},
	{"blocking_echo", echo_server, echo_client, false},
	{"nonblocking_connect", nbconn_server, nbconn_client, false},
	{"connect_refused", refused_server, refused_client, false},
	{"window_full", window_server, window_client, false},
	{"blocking_large_write", bigwrite_server, bigwrite_client, false},
	{"msg_flags", flags_server, flags_client, false},
	{"iovecs", iov_server, iov_client, false},
	{"shutdown_wr", shut_server, shut_client, false},
	{"close_unread", unread_server, unread_client, false},
	{"reset_linger0", reset_server, reset_client, false},
	{"write_after_peer_close", wpc_server, wpc_client, false},
	{"unconnected_poll", unconn_server, unconn_client, false},
	{"peer_killed", killed_server, killed_client, true},
	{"eof_wakes_reader", wake_server, wake_client, false},
	{NULL, NULL, NULL, false},
};
