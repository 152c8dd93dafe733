/* Streams over two endpoints on the in-process test nic: bytes arrive in
 * order and intact through loss, duplication and reordering; the receive
 * window holds a writer back and opens again; a stalled stream does not
 * hold up another on the same session; FIN is EOF after the data; RESET
 * is ECONNRESET, then EPIPE; a closed stream whose peer never sends its FIN
 * is let go silently after the FIN timeout, its port not pooled; an
 * urgent byte (MSG_OOB) is marked, in DATA and in a held answer. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "preload/fdtable.h"
#include "preload/listener.h"
#include "preload/phpool.h"
#include "preload/stream.h"
#include "preload/stream_wire.h"
#include "rpc_pair.h"
#include "transport/clock.h"
#include "transport/nic_test.h"
#include "transport/sys.h"

static struct rpc_pair P;

/* Reads of the coarse clock, which only the FIN timeout's check uses: this
 * definition stands in front of libc's for the code linked in here. */
static unsigned coarse_reads;

int clock_gettime(clockid_t id, struct timespec *ts)
{
	static int (*real)(clockid_t, struct timespec *);
	int (*fn)(clockid_t, struct timespec *) = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
	if (!fn) {
		fn = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
		__atomic_store_n(&real, fn, __ATOMIC_RELEASE);
	}
	if (id == CLOCK_MONOTONIC_COARSE)
		__atomic_fetch_add(&coarse_reads, 1, __ATOMIC_RELAXED);
	return fn(id, ts);
}
static struct ffile *files[16];
static unsigned nfiles;

static struct ffile *test_file(void)
{
	cr_assert_lt(nfiles, 16);
	files[nfiles] = ffile_new(&fdtab, FFILE_TEST);
	cr_assert_not_null(files[nfiles]);
	return files[nfiles++];
}

static void open_endpoints(const char *fault, unsigned rto_us)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	char err[256];
	if (fault)
		cr_assert_eq(ferry_config_set(&cfg, "FERRY_FAULT", fault, err, sizeof(err)), 0, "%s",
			     err);
	cfg.rto_us = rto_us;
	char why[256];
	cr_assert_eq(rpc_pair_open(&P, "test", &cfg, why, sizeof(why)), 0, "%s", why);
	rpc_lock(P.a);
	rpc_lock(P.b);
	cr_assert_eq(stream_init(P.a, ffile_notify), 0);
	cr_assert_eq(stream_init(P.b, ffile_notify), 0);
}

static void clean(void)
{
	open_endpoints(NULL, 1000);
}

/* No timeout goes off however slowly the test runs (valgrind): packets
 * can be counted. */
static void patient(void)
{
	open_endpoints(NULL, 10000000);
}

/* Time to look at a stream between a loss and its retransmission. */
static void slow_timeout(void)
{
	open_endpoints(NULL, 1000000);
}

static void lossy(void)
{
	open_endpoints("drop=0.03,dup=0.03,reorder=0.05,seed=42", 1000);
}

static void close_endpoints(void)
{
	rpc_unlock(P.a);
	rpc_unlock(P.b);
	rpc_pair_close(&P);
	stream_forget_all();
	while (nfiles)
		ffile_put(&fdtab, files[--nfiles]);
	fdtable_destroy(&fdtab);
}

static void pump(void)
{
	stream_run_once(P.a);
	stream_run_once(P.b);
}

/* Pumps until cond holds; a hang guard, not a measurement. */
static bool pump_until(bool (*cond)(void *), void *ctx)
{
	uint64_t end = clock_now_ns() + 20ull * 1000000000ull;
	while (!cond(ctx)) {
		if (clock_now_ns() > end)
			return false;
		pump();
	}
	return true;
}

struct opened {
	struct listener *l;
	struct stream *c;
};

static bool is_open(void *p)
{
	struct opened *o = p;
	return o->l->head && o->c->state != STREAM_OPENING;
}

/* A connected pair: c on endpoint a, s accepted on endpoint b. */
static void stream_pair(uint16_t port, struct stream **c, struct stream **s)
{
	struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct listener *l = listener_add((struct sockaddr *)&la, sizeof(la), 16,
					  test_file());
	cr_assert_not_null(l);
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_in src = dst;
	src.sin_port = htons((uint16_t)(port + 1000));
	struct opened o = {.l = l};
	cr_assert_eq(stream_open(P.a, P.sa, test_file(), (struct sockaddr *)&dst,
				 sizeof(dst), (struct sockaddr *)&src, sizeof(src), &o.c),
		     0);
	cr_assert(pump_until(is_open, &o), "OPEN answered");
	cr_assert_eq(o.c->state, STREAM_OPEN);
	*c = o.c;
	*s = listener_pop(l);
	cr_assert_not_null(*s);
	stream_set_file(*s, test_file());
	struct sockaddr_in *peer = (struct sockaddr_in *)(void *)&(*s)->peer;
	cr_assert_eq(peer->sin_port, src.sin_port, "the server sees the client's address");
}

static uint8_t pattern(uint64_t i)
{
	return (uint8_t)((i * 2654435761u) >> 13);
}

struct xfer {
	struct stream *c, *s;
	uint64_t total, sent, got;
	uint8_t *out, *in;
	bool corrupt;
	unsigned rnd;
};

static unsigned next_rand(struct xfer *x)
{
	x->rnd = x->rnd * 1103515245u + 12345u;
	return (x->rnd >> 8) & 0xffff;
}

static bool step(void *p)
{
	struct xfer *x = p;
	if (x->sent < x->total) {
		size_t n = 1 + next_rand(x) * 4;
		if (n > x->total - x->sent)
			n = (size_t)(x->total - x->sent);
		struct iovec v = {x->out + x->sent, n};
		ssize_t w = stream_send(P.a, x->c, &v, 1);
		cr_assert(w > 0 || w == -EAGAIN, "send: %zd", w);
		if (w > 0)
			x->sent += (uint64_t)w;
	}
	struct iovec v = {x->in, 1 + next_rand(x) * 2};
	ssize_t r = stream_recv(P.b, x->s, &v, 1, 0);
	cr_assert(r > 0 || r == -EAGAIN, "recv: %zd", r);
	for (ssize_t i = 0; i < r; i++)
		x->corrupt |= x->in[i] != pattern(x->got + (uint64_t)i);
	if (r > 0)
		x->got += (uint64_t)r;
	return x->got == x->total;
}

static void transfer(uint64_t total)
{
	struct xfer x = {.total = total, .rnd = 7};
	stream_pair(7000, &x.c, &x.s);
	x.out = malloc(total);
	x.in = malloc(1 << 17);
	for (uint64_t i = 0; i < total; i++)
		x.out[i] = pattern(i);
	if (!pump_until(step, &x)) {
		/* What each side holds: a stall shows which end waits on what. */
		fprintf(stderr, "sender: seq %llu acked %llu delivered %llu window %u inflight %u\n",
			(unsigned long long)x.c->tx_seq, (unsigned long long)x.c->tx_acked,
			(unsigned long long)x.c->tx_delivered, x.c->peer_window, x.c->inflight);
		fprintf(stderr, "receiver: head %llu tail %llu holes %u advertised %llu held %d\n",
			(unsigned long long)x.s->rx.head, (unsigned long long)x.s->rx.tail,
			x.s->rx.nooo, (unsigned long long)x.s->rx_advertised, x.s->held != NULL);
		rpc_dump(P.a, stderr);
		rpc_dump(P.b, stderr);
		cr_assert_fail("all %llu bytes arrived (got %llu, sent %llu)",
			       (unsigned long long)total, (unsigned long long)x.got,
			       (unsigned long long)x.sent);
	}
	cr_assert_not(x.corrupt, "bytes in order and intact");
	free(x.out);
	free(x.in);
}

Test(stream, bytes_arrive_in_order, .init = clean, .fini = close_endpoints, .timeout = 60)
{
	transfer(4u << 20);
}

Test(stream, bytes_survive_loss_duplication_and_reordering, .init = lossy,
     .fini = close_endpoints, .timeout = 60)
{
	transfer(2u << 20);
	cr_assert_gt(P.st_a.drop_fault + P.st_b.drop_fault, 0, "faults were injected");
	cr_assert_gt(P.st_a.retransmits + P.st_b.retransmits, 0, "and recovered from");
}

static bool acked_all(void *p)
{
	struct stream *c = p;
	return c->inflight == 0;
}

Test(stream, bulk_bytes_are_read_from_where_they_landed, .init = clean, .fini = close_endpoints,
     .timeout = 60)
{
	transfer(1u << 20);
	cr_assert_gt(P.st_b.bytes_rx_kept, (1u << 20) / 2, "most bytes copied once (%llu)",
		     (unsigned long long)P.st_b.bytes_rx_kept);
	cr_assert_eq(rpc_rx_kept(P.b), 0, "every kept buffer went back once read");
}

#define UNREAD_STREAMS 5

Test(stream, unread_streams_keep_no_more_buffers_than_the_nic_spares, .init = clean,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c[UNREAD_STREAMS], *s[UNREAD_STREAMS];
	static uint8_t out[STREAM_WINDOW_MAX], in[STREAM_WINDOW_MAX];
	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = pattern(i);
	ssize_t sent[UNREAD_STREAMS];
	for (unsigned i = 0; i < UNREAD_STREAMS; i++) {
		stream_pair((uint16_t)(7100 + i), &c[i], &s[i]);
		struct iovec v = {out, sizeof(out)};
		sent[i] = stream_send(P.a, c[i], &v, 1);
		cr_assert_gt(sent[i], 0);
	}
	/* More packets than the nic spares wait unread: the rest were copied,
	 * and every byte arrived all the same. */
	for (unsigned i = 0; i < UNREAD_STREAMS; i++)
		cr_assert(pump_until(acked_all, c[i]), "stream %u delivered", i);
	cr_assert_gt(rpc_rx_keep_max(P.b), 0);
	cr_assert_eq(rpc_rx_kept(P.b), rpc_rx_keep_max(P.b), "kept up to the limit, no more");
	for (unsigned i = 0; i < UNREAD_STREAMS; i++) {
		cr_assert_eq(rxbuf_avail(&s[i]->rx), (size_t)sent[i]);
		struct iovec r = {in, sizeof(in)};
		cr_assert_eq(stream_recv(P.b, s[i], &r, 1, 0), sent[i]);
		cr_assert_arr_eq(in, out, (size_t)sent[i], "stream %u's bytes intact", i);
	}
	cr_assert_eq(rpc_rx_kept(P.b), 0);
}

static uint8_t window_buf[4 << 20];

/* Opens a pair on port and writes more than the window holds; returns what
 * the write took. */
static ssize_t fill_window(uint16_t port, struct stream **c, struct stream **s)
{
	stream_pair(port, c, s);
	struct iovec v = {window_buf, sizeof(window_buf)};
	ssize_t w = stream_send(P.a, *c, &v, 1);
	cr_assert_gt(w, 0);
	cr_assert_lt((size_t)w, sizeof(window_buf), "a partial write: the window is smaller");
	return w;
}

Test(stream, the_window_holds_a_writer_back_and_reading_opens_it, .init = clean,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	ssize_t w = fill_window(7001, &c, &s);
	uint8_t *buf = window_buf;
	struct iovec v = {buf, sizeof(window_buf)};
	cr_assert_eq(stream_send(P.a, c, &v, 1), -EAGAIN);
	cr_assert_not(stream_mask(c) & EPOLLOUT);
	cr_assert(pump_until(acked_all, c));
	cr_assert_eq(stream_send(P.a, c, &v, 1), -EAGAIN, "received but unread: still full");
	cr_assert_eq(rxbuf_avail(&s->rx), (size_t)w, "memory bounded by the window");
	struct iovec r = {buf, sizeof(window_buf)};
	cr_assert_eq(stream_recv(P.b, s, &r, 1, 0), w);
	for (int i = 0; i < 1000 && !(stream_mask(c) & EPOLLOUT); i++)
		pump();
	cr_assert(stream_mask(c) & EPOLLOUT, "the window update reached the writer");
	cr_assert_gt(stream_send(P.a, c, &v, 1), 0);
}

static bool writable_file(void *p)
{
	struct stream *c = p;
	return ffile_mask(c->file) & EPOLLOUT;
}

/* As TCP's sk_stream_is_writeable: a writer that filled the window polls
 * writable again once the room is at least half of what is unread, not at
 * the first freed byte. A write in between still takes what room there is. */
Test(stream, a_full_writer_polls_writable_once_a_third_of_the_window_is_free, .init = clean,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	ssize_t w = fill_window(7002, &c, &s);
	uint8_t *buf = window_buf;
	cr_assert_not(ffile_mask(c->file) & EPOLLOUT, "full: the file polls not writable");
	cr_assert(pump_until(acked_all, c));
	/* A quarter read: room a quarter, unread three quarters. */
	struct iovec r = {buf, (size_t)w / 4};
	cr_assert_eq(stream_recv(P.b, s, &r, 1, 0), w / 4);
	uint64_t heard = c->tx_acked;
	for (int i = 0; i < 1000 && c->tx_acked == heard; i++)
		pump();
	cr_assert_gt(c->tx_acked, heard, "the window update reached the writer");
	cr_assert_gt(stream_tx_space(c), 0);
	cr_assert_not(stream_mask(c) & EPOLLOUT, "room %zu for %zu unread: not yet",
		      stream_tx_space(c), (size_t)(c->tx_seq - c->tx_acked));
	cr_assert_not(ffile_mask(c->file) & EPOLLOUT);
	/* Another quarter: room a half, unread a half. */
	cr_assert_eq(stream_recv(P.b, s, &r, 1, 0), w / 4);
	for (int i = 0; i < 1000 && !writable_file(c); i++)
		pump();
	cr_assert(writable_file(c), "room %zu for %zu unread: writable", stream_tx_space(c),
		  (size_t)(c->tx_seq - c->tx_acked));
	/* A write that leaves room under half the unread turns it back. */
	struct iovec most = {buf, stream_tx_space(c) - 1};
	cr_assert_eq(stream_send(P.a, c, &most, 1), (ssize_t)most.iov_len);
	cr_assert_not(ffile_mask(c->file) & EPOLLOUT, "one byte of room: not writable");
	struct iovec one = {buf, 1};
	cr_assert_eq(stream_send(P.a, c, &one, 1), 1, "the byte of room still takes a write");
}

Test(stream, a_stalled_stream_does_not_block_another, .init = clean, .fini = close_endpoints,
     .timeout = 60)
{
	struct stream *c1, *s1, *c2, *s2;
	stream_pair(7002, &c1, &s1);
	stream_pair(7003, &c2, &s2);
	static uint8_t buf[4 << 20];
	struct iovec v = {buf, sizeof(buf)};
	cr_assert_gt(stream_send(P.a, c1, &v, 1), 0); /* s1 never reads */
	struct xfer x = {.c = c2, .s = s2, .total = 1u << 20, .rnd = 3};
	x.out = malloc(x.total);
	x.in = malloc(1 << 17);
	for (uint64_t i = 0; i < x.total; i++)
		x.out[i] = pattern(i);
	cr_assert(pump_until(step, &x), "the second stream flowed (got %llu)",
		  (unsigned long long)x.got);
	cr_assert_not(x.corrupt);
	cr_assert_eq(stream_send(P.a, c1, &v, 1), -EAGAIN, "the first is still full");
	free(x.out);
	free(x.in);
}

static bool readable(void *p)
{
	return stream_mask(p) & EPOLLIN;
}

Test(stream, fin_is_eof_after_the_data, .init = clean, .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7004, &c, &s);
	struct iovec v = {"last words", 10};
	cr_assert_eq(stream_send(P.a, c, &v, 1), 10);
	cr_assert_eq(stream_shutdown(P.a, c, SHUT_WR), 0);
	cr_assert_eq(stream_send(P.a, c, &v, 1), -EPIPE);
	cr_assert(pump_until(readable, s));
	char buf[32];
	struct iovec r = {buf, sizeof(buf)};
	ssize_t n;
	while ((n = stream_recv(P.b, s, &r, 1, 0)) == -EAGAIN)
		pump();
	cr_assert_eq(n, 10);
	cr_assert_arr_eq(buf, "last words", 10);
	while ((n = stream_recv(P.b, s, &r, 1, 0)) == -EAGAIN)
		pump();
	cr_assert_eq(n, 0, "EOF");
	cr_assert(stream_mask(s) & EPOLLRDHUP);
	struct iovec back = {"reply", 5};
	cr_assert_eq(stream_send(P.b, s, &back, 1), 5, "the other direction still flows");
	cr_assert(pump_until(readable, c));
	while ((n = stream_recv(P.a, c, &r, 1, 0)) == -EAGAIN)
		pump();
	cr_assert_eq(n, 5);
}

static bool failed(void *p)
{
	return ((struct stream *)p)->state == STREAM_FAILED;
}

Test(stream, reset_is_econnreset_then_epipe, .init = clean, .fini = close_endpoints,
     .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7005, &c, &s);
	stream_abort(P.b, s);
	cr_assert(pump_until(failed, c));
	char buf[4];
	struct iovec r = {buf, sizeof(buf)};
	cr_assert_eq(stream_recv(P.a, c, &r, 1, 0), -ECONNRESET);
	cr_assert_eq(stream_recv(P.a, c, &r, 1, 0), 0, "reported once");
	cr_assert_eq(stream_send(P.a, c, &r, 1), -EPIPE);
	cr_assert(stream_mask(c) & (EPOLLERR | EPOLLHUP));
}

Test(stream, open_without_listener_is_refused, .init = clean, .fini = close_endpoints,
     .timeout = 60)
{
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(7999),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct stream *c;
	cr_assert_eq(stream_open(P.a, P.sa, test_file(), (struct sockaddr *)&dst,
				 sizeof(dst), (struct sockaddr *)&dst, sizeof(dst), &c),
		     0);
	cr_assert(pump_until(failed, c));
	cr_assert_eq(stream_take_error(c), ECONNREFUSED);
}

static bool delivered_all(void *p)
{
	struct stream *s = p;
	return s->tx_delivered == s->tx_seq;
}

/* The test nic's 4,096-byte packets carry 4,064 bytes each: a DATA
 * request of 64 KB and its 32-byte header took 17 packets, the last one
 * nearly empty. Requests of whole packets take 16. */
Test(stream, a_long_write_goes_in_requests_of_whole_packets, .init = patient,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7008, &c, &s);
	uint32_t dpp = rpc_session_pkt_data(P.a, P.sa);
	cr_assert_eq(dpp, 4064, "the test nic's payload per packet");
	size_t per_req = 16 * (size_t)dpp - sizeof(struct wire_seg);
	size_t total = 4 * per_req;
	static uint8_t out[4 * 16 * 4064], in[sizeof(out)];
	cr_assert_leq(total, sizeof(out));
	for (size_t i = 0; i < total; i++)
		out[i] = pattern(i);
	uint64_t pkts = P.st_a.pkts_tx, reqs = P.st_a.requests_tx;
	struct iovec v = {out, total};
	cr_assert_eq(stream_send(P.a, c, &v, 1), (ssize_t)total, "the window takes it all");
	cr_assert(pump_until(delivered_all, c));
	cr_assert_eq(P.st_a.requests_tx - reqs, 4, "DATA requests");
	cr_assert_eq(P.st_a.pkts_tx - pkts, 4 * 16, "packets: 16 a request");
	struct iovec r = {in, total};
	cr_assert_eq(stream_recv(P.b, s, &r, 1, 0), (ssize_t)total);
	cr_assert_arr_eq(in, out, total);
}

/* Runs only b's passes until s shows one of bits (a hang guard, not a
 * measurement): a pass of a's would have b's held answers go plainly. */
static void run_b_until_mask(struct stream *s, uint32_t bits)
{
	uint64_t end = clock_now_ns() + 20ull * 1000000000ull;
	while (!(stream_mask(s) & bits) && clock_now_ns() < end)
		stream_run_once(P.b);
}

/* c sends a short request, and s takes it in and reads it, with only b's
 * passes once it left: a pass of a's after it would have b answer it
 * plainly, before s writes anything. The answer stays held for s's reply. */
static void held_request(struct stream *c, struct stream *s, const char *req)
{
	size_t n = strlen(req);
	struct iovec q = {(void *)req, n};
	cr_assert_eq(stream_send(P.a, c, &q, 1), (ssize_t)n);
	stream_run_once(P.a);
	run_b_until_mask(s, EPOLLIN);
	char buf[16];
	struct iovec r = {buf, sizeof(buf)};
	cr_assert_eq(stream_recv(P.b, s, &r, 1, 0), (ssize_t)n);
	cr_assert_arr_eq(buf, req, n);
}

Test(stream, a_reply_rides_in_the_answer_to_its_request, .init = clean, .fini = close_endpoints,
     .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7006, &c, &s);
	/* No WINDOW on its own while the test looks (a slow pass, under
	 * valgrind, would outlast the real 1 ms). */
	stream_test_set_ack_delay(60ull * 1000000000ull);
	uint64_t a_pkts = P.st_a.pkts_tx, b_pkts = P.st_b.pkts_tx, b_reqs = P.st_b.requests_tx;
	held_request(c, s, "PING");
	char buf[8];
	struct iovec r = {buf, sizeof(buf)};
	struct iovec a = {"PONG", 4};
	cr_assert_eq(stream_send(P.b, s, &a, 1), 4);
	cr_assert(pump_until(readable, c));
	cr_assert_eq(stream_recv(P.a, c, &r, 1, 0), 4);
	cr_assert_arr_eq(buf, "PONG", 4);
	cr_assert_eq(P.st_b.requests_tx, b_reqs, "the reply went in the answer, not as DATA");
	cr_assert_eq(P.st_a.pkts_tx - a_pkts, 1, "one packet for the request");
	cr_assert_eq(P.st_b.pkts_tx - b_pkts, 1, "one packet for the answer and the reply");
	cr_assert_eq(c->inflight, 0, "the request is complete");
	/* Nothing else to carry it: a WINDOW says the reply arrived, late. */
	cr_assert_lt(s->tx_delivered, s->tx_seq, "not yet acknowledged");
	stream_test_set_ack_delay(0);
	cr_assert(pump_until(delivered_all, s), "acknowledged after the delay");
	cr_assert_eq(stream_tx_queued(s), 0);
}

static bool reply_and_fin_in(void *p)
{
	struct stream *c = p;
	return c->rx_fin && rxbuf_avail(&c->rx) == 4;
}

static bool one_stream_left(void *p)
{
	(void)p;
	return stream_count() == 1;
}

/* A server that replies and closes at once (inetd style, each of
 * accept_burst's): its reply rides in the answer to the request, and if
 * that answer is lost only the client's retransmission of its request
 * brings it again, answered by the server's endpoint. The closed stream
 * stays, and the exit drain waits on it (stream_delivery_pending), until
 * the client says it has the reply; before, it went with the FIN's answer
 * (which told of no reply yet) and a server that then exited lost it. */
Test(stream, a_closed_stream_stays_until_the_reply_in_its_lost_answer_arrives, .init = clean,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7008, &c, &s);
	stream_test_set_ack_delay(60ull * 1000000000ull); /* the client's word comes when asked */
	held_request(c, s, "PING");
	char buf[8];
	struct iovec r = {buf, sizeof(buf)};
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(P.a), 1), 0); /* the answer, with the reply */
	uint64_t b_reqs = P.st_b.requests_tx;
	struct iovec a = {"PONG", 4};
	cr_assert_eq(stream_send(P.b, s, &a, 1), 4);
	cr_assert_eq(P.st_b.requests_tx, b_reqs, "the reply went in the answer");
	stream_close(P.b, s);
	cr_assert(pump_until(reply_and_fin_in, c), "the retransmitted answer brought the reply");
	cr_assert_eq(stream_count(), 2, "the closed stream stays until the client has the reply");
	cr_assert(stream_delivery_pending(P.b), "an exit now would wait for the client's word");
	stream_test_set_ack_delay(0);
	cr_assert(pump_until(one_stream_left, NULL), "the client's word lets it go");
	cr_assert_eq(stream_recv(P.a, c, &r, 1, 0), 4);
	cr_assert_arr_eq(buf, "PONG", 4);
	cr_assert_eq(stream_recv(P.a, c, &r, 1, 0), 0, "then the end of the stream");
}

static bool eof(void *p)
{
	struct stream *c = p;
	return c->rx_fin;
}

/* A server that closes as it answers (its FIN in the answer to the
 * client's DATA) and exits at once: were that answer lost, only the
 * client's retransmission would bring it again, from a server gone by
 * then, and the client would read a reset. The exit's FIN pass sends the
 * FIN again as a request, which the drain waits for. */
Test(stream, an_exit_sends_again_a_fin_that_went_in_a_lost_answer, .init = patient,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7009, &c, &s);
	stream_test_set_ack_delay(60ull * 1000000000ull);
	held_request(c, s, "QUIT");
	char buf[8];
	struct iovec r = {buf, sizeof(buf)};
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(P.a), 1), 0); /* the answer, with the FIN */
	uint64_t b_reqs = P.st_b.requests_tx;
	stream_close(P.b, s);
	cr_assert_eq(P.st_b.requests_tx, b_reqs, "the FIN went in the answer");
	stream_fin_all(P.b); /* the exit drain's first step */
	cr_assert_eq(P.st_b.requests_tx, b_reqs + 1, "the exit sends the FIN again as a request");
	cr_assert(pump_until(eof, c), "the FIN arrived without the client's retransmission");
	cr_assert_eq(stream_recv(P.a, c, &r, 1, 0), 0, "the client reads the end of the stream");
}

Test(stream, a_reply_too_long_for_the_answer_goes_on_as_data, .init = clean,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7007, &c, &s);
	held_request(c, s, "GET");
	static uint8_t big[100000], got[100000];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = pattern(i);
	struct iovec a = {big, sizeof(big)};
	cr_assert_eq(stream_send(P.b, s, &a, 1), (ssize_t)sizeof(big));
	size_t n = 0;
	uint64_t end = clock_now_ns() + 20ull * 1000000000ull;
	while (n < sizeof(big) && clock_now_ns() < end) {
		pump();
		struct iovec g = {got + n, sizeof(got) - n};
		ssize_t k = stream_recv(P.a, c, &g, 1, 0);
		cr_assert(k > 0 || k == -EAGAIN, "recv: %zd", k);
		if (k > 0)
			n += (size_t)k;
	}
	cr_assert_eq(n, sizeof(big));
	cr_assert_arr_eq(got, big, sizeof(big), "answer bytes and DATA in order");
}

Test(stream, a_close_answering_the_peers_fin_rides_in_its_answer, .init = clean,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7008, &c, &s);
	cr_assert_eq(stream_shutdown(P.a, c, SHUT_WR), 0);
	stream_run_once(P.a);
	run_b_until_mask(s, EPOLLRDHUP);
	char buf[4];
	struct iovec r = {buf, sizeof(buf)};
	cr_assert_eq(stream_recv(P.b, s, &r, 1, 0), 0, "EOF");
	uint64_t b_reqs = P.st_b.requests_tx;
	stream_close(P.b, s);
	cr_assert(pump_until(eof, c), "the FIN reached the other side");
	cr_assert_eq(P.st_b.requests_tx, b_reqs, "in the answer, not as a request");
	while (stream_recv(P.a, c, &r, 1, 0) == -EAGAIN)
		pump();
	cr_assert_eq(stream_recv(P.a, c, &r, 1, 0), 0, "EOF");
	cr_assert(stream_mask(c) & EPOLLHUP, "both sides shut");
}

static bool peer_reset(void *p)
{
	return ((struct stream *)p)->reset;
}

/* As TCP: bytes sent to a stream its application closed reset the writer,
 * here a reply riding in the answer to the closer's FIN (the answer has no
 * status of its own); and a reset after the peer's FIN reads as EOF and
 * reports EPIPE (tcp_reset in CLOSE_WAIT), not ECONNRESET. */
Test(stream, a_reply_in_the_answer_to_a_closed_streams_fin_resets_the_writer, .init = clean,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7010, &c, &s);
	stream_close(P.a, c);
	stream_run_once(P.a);
	run_b_until_mask(s, EPOLLRDHUP);
	cr_assert_not_null(s->held, "the FIN's answer waits for a reply");
	struct iovec w = {"late", 4};
	cr_assert_eq(stream_send(P.b, s, &w, 1), 4, "in the held answer");
	cr_assert_null(s->held);
	cr_assert(pump_until(peer_reset, s), "the closed side resets the writer");
	char buf[8];
	struct iovec r = {buf, sizeof(buf)};
	cr_assert_eq(stream_recv(P.b, s, &r, 1, 0), 0, "EOF, as tcp_recvmsg after a FIN");
	cr_assert(stream_mask(s) & EPOLLERR);
	cr_assert_eq(stream_take_error(s), EPIPE, "a reset in CLOSE_WAIT");
	cr_assert_eq(stream_send(P.b, s, &w, 1), -EPIPE);
}

static uint16_t port_of(const struct sockaddr_storage *ss)
{
	return ((const struct sockaddr_in *)(const void *)ss)->sin_port;
}

/* As the kernel with an orphaned FIN_WAIT2 socket: the application closed,
 * its FIN went, the peer keeps its side open for good. The port stays the
 * stream's until the FIN timeout; then the stream is let go without a word
 * (the kernel's FIN_WAIT2 entry expires silently) and its placeholder is
 * closed, not pooled: the peer still holds the connection, and sees
 * nothing until it writes, which is refused as by a kernel with no socket
 * for it. */
Test(stream, a_closed_stream_whose_peer_never_ends_is_let_go_after_the_fin_timeout,
     .init = clean, .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7009, &c, &s);
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage local, other_local;
	socklen_t llen, other_llen;
	int ph = phpool_take_bound(AF_INET, (struct sockaddr *)&lo, sizeof(lo), &local, &llen);
	cr_assert_geq(ph, 0, "a bound placeholder: %s", strerror(-ph));
	c->ph_fd = ph; /* as socket.c hands it over at close */
	memcpy(&c->local, &local, llen);
	c->local_len = llen;

	stream_test_set_fin_timeout(3600ull * 1000000000ull);
	stream_close(P.a, c);
	char buf[8];
	struct iovec r = {buf, sizeof(buf)};
	ssize_t n;
	uint64_t end = clock_now_ns() + 20ull * 1000000000ull;
	while ((n = stream_recv(P.b, s, &r, 1, 0)) == -EAGAIN && clock_now_ns() < end)
		pump();
	cr_assert_eq(n, 0, "the peer sees EOF, and keeps its side open");
	for (int i = 0; i < 50; i++)
		pump();
	cr_assert_not(s->reset, "within the timeout the stream lingers");
	int other = phpool_take_bound(AF_INET, (struct sockaddr *)&lo, sizeof(lo), &other_local,
				      &other_llen);
	cr_assert_geq(other, 0);
	cr_assert_neq(port_of(&other_local), port_of(&local), "the port is not pooled yet");
	sys()->close(other);

	stream_test_set_fin_timeout(0);
	for (int i = 0; i < 50; i++)
		pump();
	errno = 0;
	cr_assert_eq(sys()->fcntl(ph, F_GETFD), -1, "the placeholder is closed at the timeout");
	cr_assert_eq(errno, EBADF);
	cr_assert_not(s->reset, "the peer hears nothing, as from the kernel");
	cr_assert_not(stream_mask(s) & (EPOLLERR | EPOLLHUP));
	struct iovec w = {"late", 4};
	cr_assert_eq(stream_send(P.b, s, &w, 1), 4, "a late write goes, as the kernel's");
	cr_assert(pump_until(peer_reset, s), "and is refused");
	cr_assert_eq(stream_recv(P.b, s, &r, 1, 0), 0, "EOF: its FIN came first");
	cr_assert_eq(stream_take_error(s), EPIPE);
	cr_assert_eq(stream_send(P.b, s, &w, 1), -EPIPE, "the next write fails");
	cr_assert(stream_mask(s) & EPOLLHUP);
}

static bool is_eof(void *p)
{
	return stream_mask(p) & EPOLLRDHUP;
}

/* The FIN timeout costs a pass of the event loop a clock read only while a
 * closed stream waits for its peer's FIN: once the last one has it, the
 * passes read no clock again (they did until the timeout of a stream long
 * gone came round). */
Test(stream, the_fin_timeout_check_is_free_once_no_stream_lingers, .init = clean,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7011, &c, &s);
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_storage local;
	socklen_t llen;
	int ph = phpool_take_bound(AF_INET, (struct sockaddr *)&lo, sizeof(lo), &local, &llen);
	cr_assert_geq(ph, 0, "a bound placeholder: %s", strerror(-ph));
	c->ph_fd = ph;
	memcpy(&c->local, &local, llen);
	c->local_len = llen;
	stream_test_set_fin_timeout(3600ull * 1000000000ull);

	for (int i = 0; i < 10; i++)
		pump();
	cr_assert_eq(__atomic_load_n(&coarse_reads, __ATOMIC_RELAXED), 0, "nothing lingers yet");
	stream_close(P.a, c);
	cr_assert(pump_until(is_eof, s), "the FIN came");
	cr_assert_gt(__atomic_load_n(&coarse_reads, __ATOMIC_RELAXED), 0,
		     "a lingering stream is looked at");
	stream_close(P.b, s);
	/* The peer's FIN ends the linger; the port goes back to the pool. */
	int again = -1;
	for (int i = 0; i < 1000 && again != ph; i++) {
		pump();
		struct sockaddr_storage other;
		socklen_t olen;
		again = phpool_take_bound(AF_INET, (struct sockaddr *)&lo, sizeof(lo), &other,
					  &olen);
		if (again >= 0 && again != ph)
			sys()->close(again);
	}
	cr_assert_eq(again, ph, "the linger ended");
	sys()->close(again);
	__atomic_store_n(&coarse_reads, 0, __ATOMIC_RELAXED);
	for (int i = 0; i < 10; i++)
		pump();
	cr_assert_eq(__atomic_load_n(&coarse_reads, __ATOMIC_RELAXED), 0,
		     "no clock read once none lingers");
}

static bool move_acked(void *p)
{
	return stream_move_ready(p);
}

static bool quiet(void *p)
{
	(void)p;
	stream_release_held(P.a);
	stream_release_held(P.b);
	return !stream_work_pending();
}

/* A peer told its stream moves waits for the new owner with a deadline
 * (STREAM_MOVE_TIMEOUT_NS); only a process that runs notices it passing,
 * so a moving stream is work that keeps the progress thread ticking, or a
 * new owner that never comes leaves the peer blocked for good. */
Test(stream, a_stream_moving_at_the_peers_word_keeps_its_process_ticking, .init = clean,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7300, &c, &s);
	stream_test_set_ack_delay(0);
	cr_assert(pump_until(quiet, NULL), "no work once the pair is idle");
	cr_assert_eq(stream_move_out(P.a, c, 42), 0);
	cr_assert(pump_until(move_acked, c), "the peer stopped for the move");
	stream_release_held(P.a);
	stream_release_held(P.b);
	pump();
	cr_assert(s->moving, "the peer waits for the new owner");
	cr_assert(stream_work_pending(), "a moving stream is work");
	stream_detach(c); /* the new owner never comes */
}

/* A connected pair as stream_pair makes, but the answer to c's OPEN is
 * lost on its way: s is accepted while c still opens (until its timeout). */
static void pair_losing_the_open_answer(uint16_t port, struct stream **c, struct stream **s)
{
	struct sockaddr_in la = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct listener *l = listener_add((struct sockaddr *)&la, sizeof(la), 16, test_file());
	cr_assert_not_null(l);
	struct sockaddr_in dst = la;
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct sockaddr_in src = dst;
	src.sin_port = htons((uint16_t)(port + 1000));
	cr_assert_eq(nic_test_lose_arrival(rpc_nic(P.a), 1), 0);
	cr_assert_eq(stream_open(P.a, P.sa, test_file(), (struct sockaddr *)&dst, sizeof(dst),
				 (struct sockaddr *)&src, sizeof(src), c),
		     0);
	for (int i = 0; i < 10 && !l->head; i++)
		pump();
	*s = listener_pop(l);
	cr_assert_not_null(*s, "accepted");
	stream_set_file(*s, test_file());
}

static bool move_answered(void *p)
{
	struct stream *s = p;
	return s->move_acked || s->move_retry || s->move_refused;
}

/* A server that accepts and forks at once (postgres) moves the stream
 * while the client may not have the answer to its OPEN yet (lost: its
 * retransmission brings it). The client must say "ask again", not reset
 * the stream: under 5% loss, every pgbench -C run lost connections so. */
Test(stream, a_move_before_the_open_is_answered_waits_for_the_answer, .init = slow_timeout,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	pair_losing_the_open_answer(7400, &c, &s);
	cr_assert_eq(c->state, STREAM_OPENING, "the answer was lost (and the timeout is 1 s)");
	cr_assert_eq(stream_move_out(P.b, s, 42), 0);
	cr_assert(pump_until(move_answered, s));
	cr_assert_not(s->move_refused, "the client reset a stream it was still opening");
	cr_assert(s->move_retry);
	cr_assert_eq(c->state, STREAM_OPENING);
	P.cfg_a.rto_us = 1000; /* the OPEN goes again */
	uint64_t end = clock_now_ns() + 20ull * 1000000000ull;
	while (!s->move_acked && !s->move_refused && clock_now_ns() < end) {
		if (s->move_retry) {
			s->move_retry = false;
			cr_assert_eq(stream_move_out(P.b, s, 42), 0);
		}
		pump();
	}
	cr_assert(s->move_acked, "the move went ahead once the OPEN was answered");
	cr_assert_eq(c->state, STREAM_OPEN);
	cr_assert(c->moving, "the client waits for the new owner");
	stream_detach(s); /* the new owner never comes */
}

static bool bytes_and_fin_in(void *p)
{
	struct stream *c = p;
	return c->rx_fin && rxbuf_avail(&c->rx) == 2;
}

/* The server accepts, writes, closes and leaves while the answer to the
 * client's OPEN is lost: its bytes and FIN say it accepted, so when the
 * session ends the connect has succeeded and the reads get the bytes, then
 * EOF, as after a kernel's SYN-ACK. Before, the connect said refused. */
Test(stream, an_open_whose_answer_was_lost_is_taken_by_the_peers_bytes, .init = patient,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	pair_losing_the_open_answer(7410, &c, &s);
	struct iovec hi = {"hi", 2};
	cr_assert_eq(stream_send(P.b, s, &hi, 1), 2);
	stream_close(P.b, s);
	cr_assert(pump_until(bytes_and_fin_in, c));
	cr_assert_eq(c->state, STREAM_OPENING, "the OPEN's answer was lost (the timeout is 10 s)");
	rpc_session_reset(P.a, P.sa, -ENOTCONN); /* the server's process went away */
	cr_assert(c->established, "its bytes said the server accepted: the connect succeeded");
	cr_assert_eq(c->err, 0, "a clean end, not a refusal");
	char buf[4];
	struct iovec r = {buf, sizeof(buf)};
	cr_assert_eq(stream_recv(P.a, c, &r, 1, 0), 2);
	cr_assert_arr_eq(buf, "hi", 2);
	cr_assert_eq(stream_recv(P.a, c, &r, 1, 0), 0, "then the end of the stream");
}

static bool rx_holds(void *p)
{
	struct stream *s = p;
	return rxbuf_avail(&s->rx) >= 5;
}

/* TCP urgent data: the last byte of a MSG_OOB send is the mark; the reader
 * reads up to it, takes its byte out of band once, then reads on past it. */
Test(stream, an_urgent_byte_leaves_the_line_and_stops_the_read, .init = clean,
     .fini = close_endpoints, .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7020, &c, &s);
	struct iovec v[3] = {{"ab", 2}, {"!", 1}, {"cd", 2}};
	cr_assert_eq(stream_send(P.a, c, &v[0], 1), 2);
	cr_assert_eq(stream_send_flags(P.a, c, &v[1], 1, MSG_OOB), 1);
	cr_assert_eq(stream_send(P.a, c, &v[2], 1), 2);
	cr_assert(pump_until(rx_holds, s));
	cr_assert(stream_mask(s) & EPOLLPRI);
	cr_assert_not(stream_at_mark(s));
	char buf[8] = {0};
	struct iovec r = {buf, sizeof(buf)};
	cr_assert_eq(stream_recv(P.b, s, &r, 1, MSG_PEEK), 2, "a peek stops at the mark too");
	cr_assert_eq(stream_recv(P.b, s, &r, 1, 0), 2);
	cr_assert_eq(memcmp(buf, "ab", 2), 0);
	cr_assert(stream_at_mark(s));
	char o = 0;
	struct iovec ov = {&o, 1};
	cr_assert_eq(stream_recv_oob(s, &ov, 1, MSG_PEEK), 1);
	cr_assert_eq(stream_recv_oob(s, &ov, 1, 0), 1);
	cr_assert_eq(o, '!');
	cr_assert_eq(stream_recv_oob(s, &ov, 1, 0), -EINVAL, "taken once");
	cr_assert_not(stream_mask(s) & EPOLLPRI);
	cr_assert_eq(stream_recv(P.b, s, &r, 1, 0), 2, "the byte is not in line");
	cr_assert_eq(memcmp(buf, "cd", 2), 0);
	cr_assert_not(stream_at_mark(s), "read past: the mark is gone");
	s->urg_inline = true;
	cr_assert_eq(stream_recv_oob(s, &ov, 1, 0), -EINVAL, "none to take");
}

static bool rx_holds_two(void *p)
{
	return rxbuf_avail(&((struct stream *)p)->rx) >= 2;
}

/* A reply that rides in the answer to the peer's DATA carries its mark. */
Test(stream, an_urgent_byte_rides_in_the_held_answer, .init = clean, .fini = close_endpoints,
     .timeout = 60)
{
	struct stream *c, *s;
	stream_pair(7030, &c, &s);
	struct iovec q = {"q", 1};
	cr_assert_eq(stream_send(P.a, c, &q, 1), 1);
	uint64_t end = clock_now_ns() + 20ull * 1000000000ull;
	while (!s->held && clock_now_ns() < end)
		pump();
	cr_assert_not_null(s->held, "the DATA's answer waits for a reply");
	struct iovec a = {"r!", 2};
	cr_assert_eq(stream_send_flags(P.b, s, &a, 1, MSG_OOB), 2);
	cr_assert_null(s->held, "the reply went in the answer");
	cr_assert(pump_until(rx_holds_two, c));
	cr_assert(stream_mask(c) & EPOLLPRI);
	cr_assert_eq(c->urg_seq, 1);
	char buf[4];
	struct iovec r = {buf, sizeof(buf)};
	cr_assert_eq(stream_recv(P.a, c, &r, 1, 0), 1, "up to the mark");
	cr_assert_eq(buf[0], 'r');
	cr_assert_eq(stream_recv_oob(c, &r, 1, 0), 1);
	cr_assert_eq(buf[0], '!');
}
