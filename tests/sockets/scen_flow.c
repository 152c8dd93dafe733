/*
 * Scenarios: flow between and within streams: full-duplex bulk transfer,
 * streams that do not block each other, writability coming back after a
 * full window, and what a reset looks like to SO_ERROR, poll and epoll.
 */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { DUPLEX = 24 << 20 };

/* ---- duplex_bulk: both ends send 24 MB at once, each reading in a thread ------ */

struct pump {
	struct peer *p;
	int fd;
	size_t done;
	bool intact;
};

static void *pump_read(void *v)
{
	struct pump *r = v;
	unsigned char *buf = malloc(1 << 20);
	r->intact = true;
	while (r->done < DUPLEX) {
		ssize_t n = read(r->fd, buf, 1 << 20);
		if (n <= 0)
			break;
		r->intact = r->intact && pattern_check(buf, (size_t)n, r->done);
		r->done += (size_t)n;
	}
	free(buf);
	return NULL;
}

static void duplex_run(struct peer *p, int fd)
{
	struct pump r = {.p = p, .fd = fd};
	pthread_t th;
	pthread_create(&th, NULL, pump_read, &r);
	unsigned char *buf = malloc(1 << 20);
	size_t sent = 0;
	while (sent < DUPLEX) {
		pattern_fill(buf, 1 << 20, sent);
		sent += write_all(p, fd, buf, 1 << 20);
	}
	free(buf);
	pthread_join(th, NULL);
	expect_int(p, "sent", (long)sent, DUPLEX);
	expect_int(p, "received", (long)r.done, DUPLEX);
	expect_true(p, "intact", r.intact);
}

static void duplex_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	duplex_run(p, fd);
	sync_send(p);
	sync_wait(p);
	close(fd);
}

static void duplex_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	duplex_run(p, fd);
	sync_wait(p);
	sync_send(p);
	close(fd);
}

/* ---- streams_independent: a stalled stream does not hold up its sibling ------- */

static void indep_server(struct peer *p)
{
	int stalled = tcp_accept(p, p->lfd);
	int live = tcp_accept(p, p->lfd);
	/* Never read "stalled" until the end: its window stays full. */
	char buf[64];
	int echoed = 0;
	for (int i = 0; i < 100; i++) {
		if (read_full(live, buf, 64) != 64 || send(live, buf, 64, 0) != 64)
			break;
		echoed++;
	}
	expect_int(p, "live_echoes", echoed, 100);
	sync_wait(p);
	char *drain = malloc(1 << 20);
	while (recv(stalled, drain, 1 << 20, MSG_DONTWAIT) > 0)
		;
	free(drain);
	close(live);
	close(stalled);
}

static void indep_client(struct peer *p)
{
	int stalled = tcp_connect(p, p->port);
	int live = tcp_connect(p, p->port);
	set_nonblock(p, stalled, true);
	char *junk = calloc(1, 1 << 16);
	size_t queued = 0;
	for (ssize_t n; (n = send(stalled, junk, 1 << 16, 0)) > 0;)
		queued += (size_t)n;
	expect_true(p, "stalled_window_full", errno == EAGAIN && queued > 0);
	char buf[64], back[64];
	int good = 0;
	for (int i = 0; i < 100; i++) {
		memset(buf, i, sizeof(buf));
		if (send(live, buf, 64, 0) != 64 || read_full(live, back, 64) != 64)
			break;
		good += !memcmp(buf, back, 64);
	}
	expect_int(p, "live_round_trips", good, 100);
	free(junk);
	sync_send(p);
	close(live);
	close(stalled);
}

/* ---- epollout_after_drain: a full window, then EPOLLOUT (LT and ET) when drained */

static void drain_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	sync_wait(p); /* the client's window is full */
	char *buf = malloc(1 << 20);
	size_t total;
	sync_recv_data(p, &total, sizeof(total));
	size_t got = 0;
	while (got < total) {
		ssize_t n = read(fd, buf, 1 << 20);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	/* The client may already have sent 100 more bytes after the drain. */
	expect_true(p, "drained_all", got >= total);
	free(buf);
	sync_wait(p);
	close(fd);
}

static void drain_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	set_nonblock(p, fd, true);
	int lt = epoll_create1(0), et = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLOUT};
	epoll_ctl(lt, EPOLL_CTL_ADD, fd, &ev);
	ev.events = EPOLLOUT | EPOLLET;
	epoll_ctl(et, EPOLL_CTL_ADD, fd, &ev);
	struct epoll_event out;
	expect_rc(p, "writable_at_start_et", epoll_wait(et, &out, 1, 5000), 1, 0);
	char *junk = calloc(1, 1 << 16);
	size_t total = 0;
	for (ssize_t n; (n = send(fd, junk, 1 << 16, 0)) > 0;)
		total += (size_t)n;
	expect_rc(p, "full_lt", epoll_wait(lt, &out, 1, 150), 0, 0);
	expect_rc(p, "full_et", epoll_wait(et, &out, 1, 0), 0, 0);
	sync_send(p);
	sync_send_data(p, &total, sizeof(total));
	expect_rc(p, "writable_again_lt", epoll_wait(lt, &out, 1, 10000), 1, 0);
	expect_int(p, "writable_again_lt_events", out.events, EPOLLOUT);
	expect_rc(p, "writable_again_et", epoll_wait(et, &out, 1, 10000), 1, 0);
	expect_rc(p, "send_again", send(fd, junk, 100, 0), 100, 0);
	free(junk);
	sync_send(p);
	close(lt);
	close(et);
	close(fd);
}

/* ---- epollout_room: the peer reading leaves an edge-triggered writer alone ---- */

/* As TCP signals write space only to a writer that ran out of it (SOCK_NOSPACE):
 * with room before and after, the peer's acknowledgement is no event. */
static void room_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	sync_wait(p);
	char buf[100];
	size_t got = 0;
	while (got < sizeof(buf)) {
		ssize_t n = read(fd, buf + got, sizeof(buf) - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	expect_int(p, "read_all", (int)got, (int)sizeof(buf));
	sync_send(p);
	sync_wait(p);
	close(fd);
}

static void room_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int et = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLOUT | EPOLLET};
	epoll_ctl(et, EPOLL_CTL_ADD, fd, &ev);
	struct epoll_event out;
	expect_rc(p, "writable_at_start", epoll_wait(et, &out, 1, 5000), 1, 0);
	char junk[100] = {0};
	expect_rc(p, "send", send(fd, junk, sizeof(junk), 0), (int)sizeof(junk), 0);
	sync_send(p);
	sync_wait(p); /* the peer read it all: its acknowledgement is on the way */
	expect_rc(p, "no_edge_with_room", epoll_wait(et, &out, 1, 150), 0, 0);
	sync_send(p);
	close(et);
	close(fd);
}

/* ---- reset_seen: SO_ERROR, poll and epoll after a reset, before any read ------- */

static void seen_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	struct linger l = {.l_onoff = 1, .l_linger = 0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	sync_wait(p);
	close(fd);
	sync_send(p);
}

static void seen_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP};
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	sync_send(p);
	sync_wait(p);
	/* Wait for the reset itself (it makes the socket readable), then look at everything. */
	expect_true(p, "readable", wait_for(fd, POLLIN) & POLLIN);
	struct pollfd all = {.fd = fd, .events = POLLIN | POLLOUT | POLLRDHUP};
	poll(&all, 1, 0);
	expect_int(p, "poll_revents", all.revents, POLLIN | POLLOUT | POLLERR | POLLHUP | POLLRDHUP);
	struct epoll_event out;
	expect_rc(p, "epoll", epoll_wait(ep, &out, 1, 5000), 1, 0);
	expect_int(p, "epoll_events", out.events, EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLRDHUP);
	int err = -1;
	socklen_t len = sizeof(err);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
	expect_int(p, "so_error", err, ECONNRESET);
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
	expect_int(p, "so_error_consumed", err, 0);
	char c;
	expect_rc(p, "recv_after_so_error", recv(fd, &c, 1, 0), 0, 0);
	close(ep);
	close(fd);
}

/* ---- shutdown_rdwr: both directions at once ------------------------------------ */

static void rdwr_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char c;
	expect_rc(p, "eof", read(fd, &c, 1), 0, 0);
	sync_send(p);
	sync_wait(p);
	close(fd);
}

static void rdwr_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	expect_rc(p, "shutdown_rdwr", shutdown(fd, SHUT_RDWR), 0, 0);
	expect_rc(p, "send_after", send(fd, "x", 1, MSG_NOSIGNAL), -1, EPIPE);
	char c;
	expect_rc(p, "recv_after", recv(fd, &c, 1, 0), 0, 0);
	sync_wait(p); /* the peer saw EOF */
	expect_rc(p, "shutdown_again", shutdown(fd, SHUT_RDWR), 0, 0);
	sync_send(p);
	close(fd);
}

/* ---- tiny_writes: 20,000 sends of 1-7 bytes, read back one byte at a time ----- */

enum { TINY_SENDS = 20000 };

static void tiny_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	size_t total;
	sync_recv_data(p, &total, sizeof(total));
	size_t got = 0;
	bool good = true;
	unsigned char c;
	while (got < total && recv(fd, &c, 1, 0) == 1) {
		good = good && pattern_check(&c, 1, got);
		got++;
	}
	expect_true(p, "all_bytes_in_order", got == total && good);
	close(fd);
}

static void tiny_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){1}, sizeof(int));
	unsigned char buf[8];
	size_t off = 0;
	int ok = 0;
	for (int i = 0; i < TINY_SENDS; i++) {
		size_t len = (size_t)(i % 7) + 1;
		pattern_fill(buf, len, off);
		if (send(fd, buf, len, 0) == (ssize_t)len)
			ok++;
		off += len;
	}
	expect_int(p, "sends", ok, TINY_SENDS);
	sync_send_data(p, &off, sizeof(off));
	char c;
	expect_rc(p, "eof", read(fd, &c, 1), 0, 0);
	close(fd);
}

/* ---- concurrent_senders: two threads' small sends stay whole and in order ------ */

enum { RECORDS = 2000, RECORD = 64 };

struct sender {
	int fd;
	unsigned char tag;
	int sent;
};

static void *sender_run(void *v)
{
	struct sender *s = v;
	unsigned char rec[RECORD];
	for (int i = 0; i < RECORDS; i++) {
		memset(rec, s->tag, RECORD);
		memcpy(rec + 1, &i, sizeof(i));
		if (send(s->fd, rec, RECORD, 0) == RECORD)
			s->sent++;
	}
	return NULL;
}

static void senders_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	int next[2] = {0, 0}, bad = 0;
	unsigned char rec[RECORD];
	for (int n = 0; n < 2 * RECORDS; n++) {
		if (read_full(fd, rec, RECORD) != RECORD) {
			bad++;
			break;
		}
		int t = rec[0] == 'A' ? 0 : rec[0] == 'B' ? 1 : -1;
		int seq;
		memcpy(&seq, rec + 1, sizeof(seq));
		bool whole = t >= 0 && rec[RECORD - 1] == rec[0] && rec[RECORD / 2] == rec[0];
		if (!whole || seq != next[t]) {
			/* Diagnostics on stderr: stdout must stay canonical. */
			if (!bad++)
				fprintf(stderr, "concurrent_senders: record %d: tag 0x%02x seq %d, expected seq %d,"
					" %s\n", n, rec[0], seq, t >= 0 ? next[t] : -1,
					whole ? "whole" : "torn (bytes of several sends mixed)");
		} else {
			next[t]++;
		}
	}
	expect_int(p, "records_whole_in_order", next[0] + next[1], 2 * RECORDS);
	expect_int(p, "bad_records", bad, 0);
	close(fd);
}

static void senders_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	struct sender a = {.fd = fd, .tag = 'A'}, b = {.fd = fd, .tag = 'B'};
	pthread_t ta, tb;
	pthread_create(&ta, NULL, sender_run, &a);
	pthread_create(&tb, NULL, sender_run, &b);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	expect_int(p, "sent", a.sent + b.sent, 2 * RECORDS);
	close(fd);
}

/* ---- close_after_small_sends: 4000 small sends, close at once: all arrive ---- */

static void smallclose_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	struct sender a = {.fd = fd, .tag = 'A'};
	sender_run(&a);
	expect_int(p, "sent", a.sent, RECORDS);
	close(fd);
}

static void smallclose_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	unsigned char rec[RECORD];
	int whole = 0;
	for (int n = 0; n < RECORDS; n++) {
		int seq;
		if (read_full(fd, rec, RECORD) != RECORD)
			break;
		memcpy(&seq, rec + 1, sizeof(seq));
		whole += rec[0] == 'A' && rec[RECORD - 1] == 'A' && seq == n;
	}
	expect_int(p, "records_whole_in_order", whole, RECORDS);
	char c;
	expect_rc(p, "eof", read(fd, &c, 1), 0, 0);
	close(fd);
}

/* ---- concurrent_accept: two threads accept on one listener, each conn once ----- */

enum { ACCEPTS = 32 };

struct acceptor {
	struct peer *p;
	int lfd;
	int count;
	unsigned char seen[ACCEPTS];
};

static void *acceptor_run(void *v)
{
	struct acceptor *a = v;
	for (;;) {
		int fd = accept(a->lfd, NULL, NULL);
		if (fd < 0)
			break; /* the listener was shut down: done */
		unsigned char id;
		if (read_full(fd, &id, 1) == 1 && id < ACCEPTS) {
			a->seen[id]++;
			a->count++;
		}
		send(fd, "k", 1, 0);
		close(fd);
	}
	return NULL;
}

static void accept2_server(struct peer *p)
{
	struct acceptor a1 = {.p = p, .lfd = p->lfd}, a2 = {.p = p, .lfd = p->lfd};
	pthread_t t1, t2;
	pthread_create(&t1, NULL, acceptor_run, &a1);
	pthread_create(&t2, NULL, acceptor_run, &a2);
	sync_wait(p); /* every connection was answered */
	/* shutdown() on a listener wakes threads blocked in accept (Linux). */
	shutdown(p->lfd, SHUT_RDWR);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	int once = 0;
	for (int i = 0; i < ACCEPTS; i++)
		once += a1.seen[i] + a2.seen[i] == 1;
	expect_int(p, "accepted", a1.count + a2.count, ACCEPTS);
	expect_int(p, "each_exactly_once", once, ACCEPTS);
}

static void accept2_client(struct peer *p)
{
	int answered = 0;
	for (int i = 0; i < ACCEPTS; i++) {
		int fd = tcp_connect(p, p->port);
		unsigned char id = (unsigned char)i;
		char k;
		if (send(fd, &id, 1, 0) == 1 && read_full(fd, &k, 1) == 1)
			answered++;
		close(fd);
	}
	expect_int(p, "answered", answered, ACCEPTS);
	sync_send(p);
}

/* ---- exit_without_close: a process that exits with a stream open ends it with EOF */

static void exitopen_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char buf[8] = {0};
	expect_rc(p, "read", read_full(fd, buf, 5), 5, 0);
	expect_str(p, "bytes", buf, "bye!!");
	expect_rc(p, "eof", read(fd, buf, 1), 0, 0);
	close(fd);
}

static void exitopen_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	expect_rc(p, "send", send(fd, "bye!!", 5, 0), 5, 0);
	/* No close: exit(3) leaves it to the kernel, which sends FIN. */
}

/* ---- epoll_et_accept: edge-triggered listener, accept until EAGAIN ------------- */

enum { ET_CONNS = 20 };

static void etaccept_server(struct peer *p)
{
	set_nonblock(p, p->lfd, true);
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET};
	epoll_ctl(ep, EPOLL_CTL_ADD, p->lfd, &ev);
	sync_send(p);
	int fds[ET_CONNS], n = 0, rounds = 0;
	while (n < ET_CONNS && rounds < 200) {
		if (epoll_wait(ep, &ev, 1, 5000) != 1)
			break;
		rounds++;
		for (;;) {
			int fd = accept4(p->lfd, NULL, NULL, SOCK_NONBLOCK);
			if (fd < 0)
				break; /* EAGAIN: wait for the next edge */
			if (n < ET_CONNS)
				fds[n++] = fd;
			else
				close(fd);
		}
	}
	expect_int(p, "accepted", n, ET_CONNS);
	expect_true(p, "last_accept_eagain", accept(p->lfd, NULL, NULL) < 0 && errno == EAGAIN);
	sync_wait(p);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	close(ep);
}

static void etaccept_client(struct peer *p)
{
	sync_wait(p);
	int fds[ET_CONNS];
	for (int i = 0; i < ET_CONNS; i++)
		fds[i] = tcp_connect(p, p->port);
	sync_send(p);
	for (int i = 0; i < ET_CONNS; i++)
		close(fds[i]);
}

const struct scenario scen_flow[] = {
	{"duplex_bulk", duplex_server, duplex_client, false},
	{"streams_independent", indep_server, indep_client, false},
	{"epollout_after_drain", drain_server, drain_client, false},
	{"epollout_room_no_edge", room_server, room_client, false},
	{"reset_seen", seen_server, seen_client, false},
	{"shutdown_rdwr", rdwr_server, rdwr_client, false},
	{"tiny_writes", tiny_server, tiny_client, false},
	{"concurrent_senders", senders_server, senders_client, false},
	{"close_after_small_sends", smallclose_server, smallclose_client, false},
	{"concurrent_accept", accept2_server, accept2_client, false},
	{"exit_without_close", exitopen_server, exitopen_client, false},
	{"epoll_et_accept", etaccept_server, etaccept_client, false},
	{NULL, NULL, NULL, false},
};
