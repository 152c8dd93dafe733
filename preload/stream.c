/* The stream protocol over rpc requests: OPEN, DATA, WINDOW, FIN, RESET. */
#include "autoconfig.h"

#include "preload/stream.h"
#include "preload/stream_end.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/libc.h"
#include "preload/phpool.h"
#include "transport/clock.h"
#include "transport/log.h"
#include "transport/rpc.h"
#include "transport/stats.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "wire structs are little-endian");

/* Receive window per stream, and the largest DATA request. A DATA request
 * this size is 45 packets at a 1,472-byte MTU: enough to amortise the
 * per-request cost, small enough that several fit the window at once. */
#define STREAM_WINDOW (256u << 10)
#define STREAM_DATA_MAX (64u << 10)
#define SID_INDEX_BITS 20
#define SID_INDEX_MASK ((1u << SID_INDEX_BITS) - 1)
/* How long bytes that came in an answer may go unacknowledged before a
 * WINDOW says so: long enough that the application's next request (a
 * client's usual next move) carries it, short against SIOCOUTQ pollers. */
#define STREAM_ACK_DELAY_NS (1000ull * 1000ull)

struct wire_addr {
	uint16_t family;
	uint16_t port; /* network order, as in sockaddr */
	uint32_t scope;
	uint8_t addr[16];
};
_Static_assert(sizeof(struct wire_addr) == 24, "wire layout");

struct wire_open {
	uint32_t client_sid;
	uint32_t window;
	struct wire_addr dst, src;
};
_Static_assert(sizeof(struct wire_open) == 56, "wire layout");

struct wire_open_resp {
	int32_t status;
	uint32_t server_sid;
	uint32_t window;
	uint32_t pad;
};

/*
 * DATA's header (payload follows), and WINDOW/FIN/RESET's whole body. Every
 * message, answers too, also says how far its sender has read (a window
 * update) and received the other direction, so those ride on whatever
 * goes anyway.
 */
struct wire_seg {
	uint32_t sid;
	uint32_t pad;
	uint64_t value;    /* DATA: sequence number; WINDOW: consumed; FIN: final seq */
	uint64_t consumed; /* the sender's rx.head */
	uint64_t received; /* the sender's rx.tail */
};
_Static_assert(sizeof(struct wire_seg) == 32, "wire layout");

/* Every answer but OPEN's. A held answer (to DATA or FIN) may carry the
 * answering side's own bytes, starting at seq, after it (the application's
 * reply), and its FIN after those (ACK_FIN): the answer to a peer's FIN is
 * usually our own close, as a TCP FIN-ACK. */
#define ACK_FIN 1u
struct wire_ack {
	int32_t status;
	uint32_t flags;
	uint64_t consumed;
	uint64_t received;
	uint64_t seq;
};
_Static_assert(sizeof(struct wire_ack) == 32, "wire layout");

struct stream_tx {
	struct stream *s;
	struct msgbuf *m;
	uint32_t len;     /* DATA bytes carried */
	unsigned attempt; /* OPEN: s->redirects when it was sent */
};

/* Streams by index (endpoint lock). */
static struct stream **st_slots;
static uint16_t *st_gen;
static uint32_t st_cap, st_used;
static uint32_t *st_free;
static uint32_t st_nfree;
static struct listener *listeners;
uint32_t stream_forks;
/* A peer's stream told to move waits this long for its new owner: one
 * that never comes (it died on the way) must not hang our writers. */
#define STREAM_MOVE_TIMEOUT_NS (5000ull * 1000000ull)
static unsigned st_nmoving; /* streams moving at the peer's word */
/* How many times a client follows a shared listener elsewhere. */
#define STREAM_REDIRECTS_MAX 4
static struct stream *st_redirect_head;
/* Addresses of shared listeners this process let go of: an OPEN for one
 * (a client's session still leads here) is sent back to the rendezvous. */
#define LISTENERS_GONE_MAX 8
static struct wire_addr lis_gone[LISTENERS_GONE_MAX];
static unsigned lis_gone_next;


/* DATA requests waiting for their answer (see stream_run_once). */
#define ACK_PENDING_MAX 256
static struct {
	struct rpc_req *req;
	struct stream *s; /* referenced; NULL for an unknown stream */
	int status;
} ack_pending[ACK_PENDING_MAX];
static unsigned ack_npending;
/* Streams holding a DATA answer, streams owing an acknowledgement: lists
 * that hold a reference each; an entry whose reason went away is dropped
 * when next walked. */
static struct stream *held_head, *owed_head;
static int st_work; /* atomic: either list is non-empty (a hint) */
static bool st_tx_pending;
/* DATA waits for the application's next wait (epoll_wait, poll, a blocking
 * call) so replies to many connections leave in one batch. Atomic: read
 * without the lock. */
static bool st_tx_deferred;

/*
 * A closed stream keeps its port (ph_wait) until the peer's side ends. One
 * whose peer keeps its side open for good (an orphaned FIN_WAIT2 in TCP's
 * terms) is given up after tcp_fin_timeout, as the kernel gives up on such
 * a socket: without a word (the kernel's FIN_WAIT2 entry just expires), so
 * the peer hears of it only if it writes, refused as a write to any closed
 * stream is. The port goes back to the system, not to the pool, whose
 * ports serve this process's next connections, quite likely to the same
 * peer, which may still hold this one. Checked in
 * stream_run_once (each wait of the application, each progress tick), with
 * no timer of its own: a process asleep for good checks at its next
 * wake-up, and meanwhile only a connect of its own would want the port.
 */
#define STREAM_FIN_TIMEOUT_DEFAULT_NS (60ull * 1000000000ull)
static uint64_t st_fin_timeout_ns = STREAM_FIN_TIMEOUT_DEFAULT_NS;
static bool st_fin_timeout_set;
/* No later than the earliest closed_ns of a lingering stream; UINT64_MAX
 * whenever none lingers, so stream_run_once reads no clock then. */
static uint64_t st_linger_oldest = UINT64_MAX;
static unsigned st_nlinger; /* streams in ph_wait */

bool stream_tx_deferred(void)
{
	return __atomic_load_n(&st_tx_deferred, __ATOMIC_ACQUIRE);
}

void stream_tx_deferred_clear(void)
{
	__atomic_store_n(&st_tx_deferred, false, __ATOMIC_RELEASE);
}

bool stream_work_pending(void)
{
	return __atomic_load_n(&st_work, __ATOMIC_RELAXED) != 0;
}

static void work_update(void)
{
	__atomic_store_n(&st_work, held_head || owed_head || st_redirect_head, __ATOMIC_RELAXED);
}

bool stream_take_tx_pending(void)
{
	bool p = st_tx_pending;
	st_tx_pending = false;
	return p;
}

/* A jiffy's resolution is plenty against a timeout of seconds, and
 * cheaper than clock_now_ns on a path every pass reads. */
static uint64_t linger_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fin_timeout_read(void)
{
	if (st_fin_timeout_set)
		return;
	st_fin_timeout_set = true;
	int fd = open("/proc/sys/net/ipv4/tcp_fin_timeout", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	char buf[32];
	ssize_t n = libc()->read(fd, buf, sizeof(buf) - 1);
	libc()->close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	char *end;
	unsigned long sec = strtoul(buf, &end, 10);
	if (end != buf && sec > 0 && sec < 24ul * 3600)
		st_fin_timeout_ns = (uint64_t)sec * 1000000000ull;
}

static uint64_t st_ack_delay_ns = STREAM_ACK_DELAY_NS;

void stream_test_set_ack_delay(uint64_t ns)
{
	st_ack_delay_ns = ns;
}

void stream_test_set_fin_timeout(uint64_t ns)
{
	st_fin_timeout_set = true;
	st_fin_timeout_ns = ns;
}

/* --- table --- */

/* A new stream of this process on rpc's session (one reference). */
static struct stream *stream_alloc(struct rpc *rpc, int session)
{
	if (st_nfree == 0 && st_used == st_cap) {
		uint32_t cap = st_cap ? st_cap * 2 : 256;
		if (cap > SID_INDEX_MASK + 1)
			return NULL;
		struct stream **ns = realloc(st_slots, cap * sizeof(*ns));
		if (!ns)
			return NULL;
		st_slots = ns;
		uint16_t *ng = realloc(st_gen, cap * sizeof(*ng));
		if (!ng)
			return NULL;
		st_gen = ng;
		uint32_t *nf = realloc(st_free, cap * sizeof(*nf));
		if (!nf)
			return NULL;
		st_free = nf;
		memset(st_slots + st_cap, 0, (cap - st_cap) * sizeof(*ns));
		memset(st_gen + st_cap, 0, (cap - st_cap) * sizeof(*ng));
		st_cap = cap;
	}
	struct stream *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	uint32_t idx = st_nfree ? st_free[--st_nfree] : st_used++;
	st_gen[idx] = (uint16_t)((st_gen[idx] + 1) & 0xfff);
	s->sid = ((uint32_t)st_gen[idx] << SID_INDEX_BITS) | idx;
	st_slots[idx] = s;
	rxbuf_init(&s->rx, STREAM_WINDOW);
	s->refs = 1;
	s->ph_fd = -1;
	s->born_fork = stream_forks;
	s->rpc = rpc;
	s->session = session;
	s->token = rpc_session_token(rpc, session);
	return s;
}

static struct stream *stream_lookup(uint32_t sid, int session)
{
	uint32_t idx = sid & SID_INDEX_MASK;
	if (idx >= st_used)
		return NULL;
	struct stream *s = st_slots[idx];
	if (!s || s->sid != sid || s->session != session)
		return NULL;
	return s;
}

static void stream_put(struct stream *s)
{
	if (--s->refs > 0)
		return;
	uint32_t idx = s->sid & SID_INDEX_MASK;
	if (idx < st_cap && st_slots[idx] == s) {
		st_slots[idx] = NULL;
		st_free[st_nfree++] = idx;
	}
	if (s->ph_fd >= 0) {
		if (s->ended)
			phpool_give_bound(s->ph_fd, &s->local, s->local_len);
		else
			libc()->close(s->ph_fd);
	}
	rxbuf_free(&s->rx);
	free(s);
}

/* --- readiness --- */

size_t stream_tx_space(const struct stream *s)
{
	if (s->moving || s->attaching)
		return 0;
	uint64_t limit = s->tx_acked + s->peer_window;
	return limit > s->tx_seq ? (size_t)(limit - s->tx_seq) : 0;
}

size_t stream_tx_queued(const struct stream *s)
{
	/* As SIOCOUTQ: sent and not yet acknowledged as received. */
	return (size_t)(s->tx_seq - s->tx_delivered);
}

/* The peer's FIN is in, every byte before it too (SOCK_DONE in TCP). */
static bool stream_fin_in(const struct stream *s)
{
	return s->rx_fin && s->rx.tail >= s->fin_seq;
}

static bool stream_eof(const struct stream *s)
{
	return stream_fin_in(s) || s->rd_shut;
}

uint32_t stream_mask(const struct stream *s)
{
	if (s->state == STREAM_OPENING)
		return 0;
	if (s->state == STREAM_FAILED || s->reset) {
		uint32_t m = EPOLLIN | EPOLLOUT | EPOLLHUP | EPOLLRDHUP;
		return s->err ? m | EPOLLERR : m;
	}
	uint32_t m = 0;
	if (rxbuf_avail(&s->rx) || stream_eof(s))
		m |= EPOLLIN;
	if (stream_eof(s))
		m |= EPOLLRDHUP;
	/* As tcp_poll: a shut write side polls writable (the write fails). */
	if (s->wr_shut || stream_tx_space(s) > 0)
		m |= EPOLLOUT;
	if (stream_eof(s) && s->wr_shut)
		m |= EPOLLHUP;
	return m;
}

static void stream_notify(struct stream *s, uint32_t events)
{
	if (s->file)
		ffile_notify(s->file, stream_mask(s), events);
}

void stream_set_file(struct stream *s, struct ffile *file)
{
	s->file = file;
	stream_notify(s, EPOLLIN | EPOLLOUT);
}

/* A closed stream that kept its placeholder for the peer's side (ph_wait)
 * lets it go once that side ended. Only where the caller holds s by
 * another reference, or uses it no more. */
static void stream_linger_end(struct stream *s)
{
	s->ph_wait = false;
	if (--st_nlinger == 0)
		st_linger_oldest = UINT64_MAX;
	stream_put(s);
}

static void stream_unlinger(struct stream *s)
{
	if (s->ph_wait && s->ended)
		stream_linger_end(s);
}

static void stream_fail(struct stream *s, int err)
{
	s->ended = true; /* a reset, either way, or the peer is gone */
	if (s->reset)
		return;
	s->reset = true;
	s->state = STREAM_FAILED;
	/* As tcp_reset: a reset after the peer's FIN, with our side still
	 * open (CLOSE_WAIT), is a broken pipe, not a reset connection. */
	if (err == ECONNRESET && stream_fin_in(s) && !s->wr_shut)
		err = EPIPE;
	if (!s->err)
		s->err = err;
	stream_notify(s, EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLRDHUP);
}

int stream_take_error(struct stream *s)
{
	int e = s->err;
	s->err = 0;
	return e;
}

/* What a message to the peer says about our receive side. */
static void stream_tell(struct stream *s, uint64_t *consumed, uint64_t *received)
{
	*consumed = s->rx_advertised = s->rx.head;
	*received = s->rx_told = s->rx.tail;
}

/* The peer's word on our direction: how far it has read and received. */
static void stream_heard(struct stream *s, uint64_t consumed, uint64_t received)
{
	if (received > s->tx_delivered && received <= s->tx_seq)
		s->tx_delivered = received;
	if (consumed > s->tx_acked && consumed <= s->tx_seq) {
		s->tx_acked = consumed;
		stream_notify(s, EPOLLOUT);
	}
}

/* --- sending --- */

static int stream_send_ctl(struct rpc *rpc, struct stream *s, uint8_t type, uint64_t value,
			   rpc_cont_fn cont);

static void stream_owe(struct stream *s, bool was_told)
{
	if (was_told)
		s->owed_since = clock_now_ns();
	if (s->on_owed)
		return;
	s->on_owed = true;
	s->refs++;
	s->owed_next = owed_head;
	owed_head = s;
	__atomic_store_n(&st_work, 1, __ATOMIC_RELAXED);
}

static void ctl_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag);

/* Bytes the peer sent in an answer (its reply to our DATA). */
static void stream_take_bytes(struct rpc *rpc, struct stream *s, const struct wire_ack *a,
			      size_t len)
{
	if (s->reset || s->state != STREAM_OPEN) {
		/* Nothing more for the application. Closed here: the writer is
		 * reset, as TCP resets data sent to a closed socket (and as
		 * handle_data refuses DATA). */
		if (!s->file && !s->ended && s->state == STREAM_OPEN &&
		    stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, ctl_cont) == 0)
			s->ended = true;
		return;
	}
	bool was_told = s->rx_told == s->rx.tail;
	int rc = rxbuf_put(&s->rx, a->seq, a + 1, len);
	if (rc) {
		log_warn("stream %u: answer bytes at %llu+%zu refused (%d): resetting", s->sid,
			 (unsigned long long)a->seq, len, rc);
		stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, ctl_cont);
		stream_fail(s, ECONNRESET);
		return;
	}
	stream_owe(s, was_told);
	stream_notify(s, EPOLLIN);
}

static void ctl_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct stream_tx *tx = tag;
	rpc_free_msg(rpc, tx->m);
	struct stream *s = tx->s;
	free(tx);
	s->inflight--;
	if (status == 0 && resp->data_size >= sizeof(struct wire_ack)) {
		const struct wire_ack *a = (const void *)resp->buf;
		stream_heard(s, a->consumed, a->received);
		size_t len = resp->data_size - sizeof(*a);
		if (len > 0 && a->status == 0)
			stream_take_bytes(rpc, s, a, len);
		if ((a->flags & ACK_FIN) && a->status == 0 && !s->rx_fin) {
			s->rx_fin = s->ended = true;
			s->fin_seq = a->seq + len;
			stream_notify(s, EPOLLIN | EPOLLRDHUP);
		}
	}
	stream_unlinger(s);
	stream_put(s);
}

static int stream_send_ctl(struct rpc *rpc, struct stream *s, uint8_t type, uint64_t value,
			   rpc_cont_fn cont)
{
	if (s->moving && type != STREAM_REQ_MOVE) {
		/* Nothing goes to the old owner: the new one hears it once it
		 * attached (a WINDOW is said by the next message anyway). */
		s->move_fin |= type == STREAM_REQ_FIN;
		s->move_reset |= type == STREAM_REQ_RESET;
		return 0;
	}
	struct stream_tx *tx = calloc(1, sizeof(*tx));
	if (!tx)
		return -ENOMEM;
	struct msgbuf *m = rpc_alloc_msg(rpc, sizeof(struct wire_seg));
	if (!m) {
		free(tx);
		return -ENOMEM;
	}
	struct wire_seg *w = (void *)m->buf;
	*w = (struct wire_seg){.sid = s->peer_sid, .value = value};
	stream_tell(s, &w->consumed, &w->received);
	tx->s = s;
	tx->m = m;
	int rc = rpc_enqueue_request(rpc, s->session, type, m, cont, tx);
	if (rc) {
		rpc_free_msg(rpc, m);
		free(tx);
		return rc;
	}
	s->refs++;
	s->inflight++;
	/* A FIN waits for the application's next wait, as DATA does, so the
	 * closes of one pass of its loop leave in one batch with its other
	 * requests (a new connection's OPEN, say). */
	if (type == STREAM_REQ_FIN)
		__atomic_store_n(&st_tx_deferred, true, __ATOMIC_RELEASE);
	else
		st_tx_pending = true;
	return 0;
}

static void data_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct stream_tx *tx = tag;
	struct stream *s = tx->s;
	if (status == 0 && resp->data_size >= sizeof(struct wire_ack)) {
		const struct wire_ack *a = (const void *)resp->buf;
		if (a->status < 0)
			status = a->status;
	} else if (status == 0) {
		status = -EPROTO;
	}
	if (status < 0)
		stream_fail(s, ECONNRESET);
	ctl_cont(rpc, status, status == 0 ? resp : NULL, tag);
}

static size_t iov_copy_from(uint8_t *dst, const struct iovec *iov, int iovcnt, size_t skip,
			    size_t len)
{
	size_t done = 0;
	for (int i = 0; i < iovcnt && done < len; i++) {
		size_t l = iov[i].iov_len;
		if (skip >= l) {
			skip -= l;
			continue;
		}
		size_t n = l - skip;
		if (n > len - done)
			n = len - done;
		memcpy(dst + done, (const uint8_t *)iov[i].iov_base + skip, n);
		done += n;
		skip = 0;
	}
	return done;
}

/* Answers the peer's DATA, WINDOW, FIN or RESET req: status, and what s
 * (if any) has read and received. A held answer may carry len bytes of
 * ours from iov, at tx_seq, and flags (ACK_FIN). False when no buffer could
 * be had: the answer went bare, which the transport treats as lost, so the
 * peer retries and nothing it was to carry was said. */
static bool stream_answer(struct rpc *rpc, struct rpc_req *req, struct stream *s, int status,
			  uint32_t flags, const struct iovec *iov, int iovcnt, size_t len)
{
	struct msgbuf *m = rpc_resp_msg(rpc, req, (uint32_t)(sizeof(struct wire_ack) + len));
	if (!m) {
		rpc_respond(rpc, req); /* the handle goes back either way */
		return false;
	}
	struct wire_ack *a = (void *)m->buf;
	*a = (struct wire_ack){.status = status, .flags = flags};
	if (s) {
		a->seq = s->tx_seq;
		stream_tell(s, &a->consumed, &a->received);
	}
	if (len)
		iov_copy_from(m->buf + sizeof(*a), iov, iovcnt, 0, len);
	rpc_respond(rpc, req);
	return true;
}

static void respond_ack(struct rpc *rpc, struct rpc_req *req, int status, struct stream *s)
{
	stream_answer(rpc, req, s, status, 0, NULL, 0, 0);
}

/* Answers the peer's held DATA or FIN (see stream_answer). */
static bool stream_answer_held(struct rpc *rpc, struct stream *s, uint32_t flags,
			       const struct iovec *iov, int iovcnt, size_t len)
{
	struct rpc_req *req = s->held;
	s->held = NULL;
	return stream_answer(rpc, req, s, 0, flags, iov, iovcnt, len);
}

/* Shuts our side: in the held answer when there is one, else as a FIN
 * request. 0 or -errno. */
static int stream_send_fin(struct rpc *rpc, struct stream *s)
{
	if (!s->held || !stream_answer_held(rpc, s, ACK_FIN, NULL, 0, 0))
		return stream_send_ctl(rpc, s, STREAM_REQ_FIN, s->tx_seq, ctl_cont);
	__atomic_store_n(&st_tx_deferred, true, __ATOMIC_RELEASE);
	return 0;
}

/* Sends the first bytes of a write inside the answer to the peer's held
 * DATA: one packet's worth, no more, since a longer answer costs the
 * peer a round trip per packet (RFRs) where DATA streams. Returns the
 * bytes sent. */
static size_t stream_send_in_answer(struct rpc *rpc, struct stream *s, const struct iovec *iov,
				    int iovcnt, size_t len)
{
	uint32_t room = rpc_max_pkt_data(rpc);
	room = room > sizeof(struct wire_ack) ? room - (uint32_t)sizeof(struct wire_ack) : 0;
	if (len > room)
		len = room;
	if (len == 0 || !stream_answer_held(rpc, s, 0, iov, iovcnt, len))
		return 0;
	s->tx_seq += len;
	__atomic_store_n(&st_tx_deferred, true, __ATOMIC_RELEASE);
	return len;
}

ssize_t stream_send(struct rpc *rpc, struct stream *s, const struct iovec *iov, int iovcnt)
{
	if (s->state == STREAM_OPENING)
		return -EAGAIN;
	if (s->err)
		return -stream_take_error(s);
	if (s->wr_shut || s->reset || s->state != STREAM_OPEN)
		return -EPIPE;
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	if (total == 0)
		return 0;
	size_t done = 0;
	if (s->held) {
		size_t space = stream_tx_space(s);
		done = stream_send_in_answer(rpc, s, iov, iovcnt, total < space ? total : space);
	}
	while (done < total) {
		size_t chunk = stream_tx_space(s);
		if (chunk == 0)
			break;
		if (chunk > total - done)
			chunk = total - done;
		if (chunk > STREAM_DATA_MAX)
			chunk = STREAM_DATA_MAX;
		struct stream_tx *tx = calloc(1, sizeof(*tx));
		struct msgbuf *m = tx ? rpc_alloc_msg(rpc, (uint32_t)(sizeof(struct wire_seg) + chunk))
				      : NULL;
		if (!m) {
			free(tx);
			if (done == 0 && s->inflight == 0)
				return -ENOBUFS;
			break; /* memory comes back as requests complete */
		}
		struct wire_seg *w = (void *)m->buf;
		*w = (struct wire_seg){.sid = s->peer_sid, .value = s->tx_seq};
		stream_tell(s, &w->consumed, &w->received);
		iov_copy_from(m->buf + sizeof(*w), iov, iovcnt, done, chunk);
		tx->s = s;
		tx->m = m;
		int rc = rpc_enqueue_request(rpc, s->session, STREAM_REQ_DATA, m, data_cont, tx);
		if (rc) {
			rpc_free_msg(rpc, m);
			free(tx);
			stream_fail(s, ECONNRESET);
			if (done)
				break;
			return -stream_take_error(s);
		}
		s->refs++;
		s->inflight++;
		__atomic_store_n(&st_tx_deferred, true, __ATOMIC_RELEASE);
		tx->len = (uint32_t)chunk;
		s->tx_seq += chunk;
		done += chunk;
	}
	if (done == 0)
		return -EAGAIN;
	if (s->file && stream_tx_space(s) == 0)
		ffile_notify(s->file, stream_mask(s), 0);
	return (ssize_t)done;
}

/* --- receiving --- */

ssize_t stream_recv(struct rpc *rpc, struct stream *s, const struct iovec *iov, int iovcnt,
		    int flags)
{
	if (s->state == STREAM_OPENING)
		return -EAGAIN;
	size_t n;
	if (flags & MSG_TRUNC) {
		size_t want = 0;
		for (int i = 0; i < iovcnt; i++)
			want += iov[i].iov_len;
		n = (flags & MSG_PEEK) ? (want < rxbuf_avail(&s->rx) ? want : rxbuf_avail(&s->rx))
				       : rxbuf_skip(&s->rx, want);
	} else {
		n = rxbuf_read(&s->rx, iov, iovcnt, (flags & MSG_PEEK) != 0);
	}
	if (n > 0) {
		if (!(flags & MSG_PEEK)) {
			/* stream_send_ctl tells the peer rx.head (rx_advertised) */
			if (!s->reset && s->state == STREAM_OPEN &&
			    rxbuf_update_due(&s->rx, s->rx_advertised))
				stream_send_ctl(rpc, s, STREAM_REQ_WINDOW, s->rx.head, ctl_cont);
			if (s->file && rxbuf_avail(&s->rx) == 0)
				ffile_notify(s->file, stream_mask(s), 0);
		}
		return (ssize_t)n;
	}
	/* As tcp_recvmsg: after the peer's FIN a read says EOF even once a
	 * reset came; the error waits for a write or SO_ERROR. */
	if (stream_fin_in(s))
		return 0;
	if (s->err)
		return -stream_take_error(s);
	if (stream_eof(s) || s->reset || s->state == STREAM_FAILED)
		return 0;
	return -EAGAIN;
}

int stream_shutdown(struct rpc *rpc, struct stream *s, int how)
{
	if (how == SHUT_RD || how == SHUT_RDWR)
		s->rd_shut = true;
	if ((how == SHUT_WR || how == SHUT_RDWR) && !s->wr_shut) {
		s->wr_shut = true;
		if (s->state == STREAM_OPEN && !s->reset && !s->fin_sent && stream_send_fin(rpc, s) == 0)
			s->fin_sent = true;
	}
	stream_notify(s, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLHUP);
	return 0;
}

void stream_close(struct rpc *rpc, struct stream *s)
{
	s->file = NULL;
	if (s->state == STREAM_OPEN && !s->reset) {
		/* As TCP: closing with unread data resets the connection. */
		if (rxbuf_avail(&s->rx) > 0) {
			if (stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, ctl_cont) == 0)
				s->ended = true;
		} else if (!s->fin_sent && stream_send_fin(rpc, s) == 0) {
			s->fin_sent = true;
		}
	}
	s->wr_shut = s->rd_shut = true;
	s->reset = true; /* nothing more for the application */
	/* The port stays ours until the peer's side ended too: the peer's
	 * application may hold its end of the connection for a while yet, and
	 * no new connection may show the same pair of addresses meanwhile. */
	if (s->ph_fd >= 0 && !s->ended && !s->ph_wait) {
		s->ph_wait = true;
		s->refs++;
		st_nlinger++;
		s->closed_ns = linger_now_ns();
		if (s->closed_ns < st_linger_oldest)
			st_linger_oldest = s->closed_ns;
	}
	stream_put(s);
}

void stream_abort(struct rpc *rpc, struct stream *s)
{
	if (s->state == STREAM_OPEN && !s->reset && !s->fin_sent &&
	    stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, ctl_cont) == 0)
		s->ended = true;
	s->fin_sent = true;
	stream_close(rpc, s);
}

void stream_abandon(struct stream *s)
{
	s->file = NULL;
}

void stream_fork_child(void)
{
	for (uint32_t i = 0; i < st_used; i++) {
		struct stream *s = st_slots[i];
		if (s && s->ph_fd >= 0) {
			libc()->close(s->ph_fd);
			s->ph_fd = -1;
		}
	}
}

void stream_forget_all(void)
{
	for (uint32_t i = 0; i < st_used; i++) {
		struct stream *s = st_slots[i];
		if (!s)
			continue;
		rxbuf_free(&s->rx);
		free(s);
	}
	free(st_slots);
	free(st_gen);
	free(st_free);
	st_slots = NULL;
	st_gen = NULL;
	st_free = NULL;
	st_cap = st_used = st_nfree = 0;
	ack_npending = 0;
	held_head = owed_head = NULL;
	st_linger_oldest = UINT64_MAX;
	st_nlinger = 0;
	st_nmoving = 0;
	st_redirect_head = NULL;
	work_update();
	rxbuf_spares_release();
	while (listeners) {
		struct listener *l = listeners;
		listeners = l->next;
		while (l->offers) {
			struct listener_offer *o = l->offers;
			l->offers = o->next;
			free(o);
		}
		free(l);
	}
}

void stream_fin_all(struct rpc *rpc)
{
	for (uint32_t i = 0; i < st_used; i++) {
		struct stream *s = st_slots[i];
		if (s && s->file && s->state == STREAM_OPEN && !s->reset && !s->fin_sent &&
		    stream_send_fin(rpc, s) == 0)
			s->fin_sent = true;
	}
}

/* --- opening --- */

static void addr_to_wire(const struct sockaddr *sa, struct wire_addr *w)
{
	memset(w, 0, sizeof(*w));
	if (!sa)
		return;
	w->family = sa->sa_family;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		w->port = in->sin_port;
		memcpy(w->addr, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		w->port = in6->sin6_port;
		w->scope = in6->sin6_scope_id;
		memcpy(w->addr, &in6->sin6_addr, 16);
	}
}

/* As the kernel shows it on a socket of family: v4 on a v6 socket is mapped. */
static socklen_t wire_to_addr(const struct wire_addr *w, int family, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *in6 = (void *)ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = w->port;
		if (w->family == AF_INET) {
			in6->sin6_addr.s6_addr[10] = 0xff;
			in6->sin6_addr.s6_addr[11] = 0xff;
			memcpy(&in6->sin6_addr.s6_addr[12], w->addr, 4);
		} else {
			memcpy(&in6->sin6_addr, w->addr, 16);
			in6->sin6_scope_id = w->scope;
		}
		return sizeof(*in6);
	}
	struct sockaddr_in *in = (void *)ss;
	in->sin_family = AF_INET;
	in->sin_port = w->port;
	memcpy(&in->sin_addr, w->family == AF_INET ? w->addr : w->addr + 12, 4);
	return sizeof(*in);
}

/*
 * OPEN again at a fresh rendezvous, where another holder of the listener
 * answers: the listener's process let go of it (-ESTALE), or went away
 * before it answered (its session ended), so it never took the stream, as
 * a SYN nobody answered is sent again. The socket layer gets the session,
 * off this lock. False when s cannot go again.
 */
static bool stream_open_again(struct stream *s)
{
	if (s->state != STREAM_OPENING || !s->file || s->redirect ||
	    s->redirects >= STREAM_REDIRECTS_MAX)
		return false;
	s->redirects++;
	s->redirect = true;
	s->refs++;
	s->redirect_next = st_redirect_head;
	st_redirect_head = s;
	work_update();
	return true;
}

static void open_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct stream_tx *tx = tag;
	struct stream *s = tx->s;
	unsigned attempt = tx->attempt;
	rpc_free_msg(rpc, tx->m);
	free(tx);
	s->inflight--;
	if (attempt != s->redirects || s->redirect) {
		/* The answer to an attempt made before the stream went again. */
		stream_put(s);
		return;
	}
	int err = 0;
	if (status < 0) {
		err = ECONNRESET;
	} else if (resp->data_size < sizeof(struct wire_open_resp)) {
		err = EPROTO;
	} else {
		const struct wire_open_resp *r = (const void *)resp->buf;
		if (r->status < 0) {
			err = -r->status;
		} else {
			s->peer_sid = r->server_sid;
			s->peer_window = r->window;
		}
	}
	if ((err == ESTALE || status < 0) && stream_open_again(s)) {
		/* sent elsewhere */
	} else if (err) {
		s->state = STREAM_FAILED;
		s->reset = s->ended = true;
		s->err = err == ESTALE ? ECONNREFUSED : err;
		stream_notify(s, EPOLLOUT | EPOLLERR | EPOLLHUP);
	} else {
		s->state = STREAM_OPEN;
		s->established = true;
		stats_inc(ferry_stats()->streams_connected);
		if (!s->file && /* closed while opening */
		    stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, ctl_cont) == 0)
			s->ended = true;
		stream_notify(s, EPOLLOUT);
	}
	stream_unlinger(s);
	stream_put(s);
}

/* Queues s's OPEN on its session; holds a reference for the answer. */
static int stream_send_open(struct rpc *rpc, struct stream *s)
{
	struct stream_tx *tx = calloc(1, sizeof(*tx));
	struct msgbuf *m = tx ? rpc_alloc_msg(rpc, sizeof(struct wire_open)) : NULL;
	if (!m) {
		free(tx);
		return -ENOMEM;
	}
	struct wire_open *w = (void *)m->buf;
	w->client_sid = s->sid;
	w->window = s->rx.cap;
	addr_to_wire((const struct sockaddr *)&s->peer, &w->dst);
	addr_to_wire((const struct sockaddr *)&s->local, &w->src);
	tx->s = s;
	tx->m = m;
	tx->attempt = s->redirects;
	int rc = rpc_enqueue_request(rpc, s->session, STREAM_REQ_OPEN, m, open_cont, tx);
	if (rc) {
		rpc_free_msg(rpc, m);
		free(tx);
		return rc;
	}
	s->refs++;
	s->inflight++;
	/* Sent at the application's next wait (a blocking connect's is right
	 * away), with whatever else it queued meanwhile. */
	__atomic_store_n(&st_tx_deferred, true, __ATOMIC_RELEASE);
	return 0;
}

int stream_open(struct rpc *rpc, int session, struct ffile *file, const struct sockaddr *dst,
		socklen_t dst_len, const struct sockaddr *src, socklen_t src_len,
		struct stream **out)
{
	struct stream *s = stream_alloc(rpc, session);
	if (!s)
		return -ENOMEM;
	s->file = file;
	s->state = STREAM_OPENING;
	memcpy(&s->peer, dst, dst_len);
	s->peer_len = dst_len;
	memcpy(&s->local, src, src_len);
	s->local_len = src_len;
	int rc = stream_send_open(rpc, s);
	if (rc) {
		stream_put(s);
		return rc;
	}
	*out = s;
	return 0;
}

struct stream *stream_take_redirect(void)
{
	struct stream *s = st_redirect_head;
	if (s) {
		st_redirect_head = s->redirect_next;
		s->redirect_next = NULL;
		work_update();
	}
	return s;
}

bool stream_redirect_pending(void)
{
	return __atomic_load_n(&st_redirect_head, __ATOMIC_RELAXED) != NULL;
}

void stream_redirect_done(struct rpc *rpc, struct stream *s, int session)
{
	s->redirect = false;
	int rc = session < 0 ? session : !s->file ? -ECONNABORTED : 0;
	if (rc == 0) {
		s->session = session;
		s->token = rpc_session_token(rpc, session);
		rc = stream_send_open(rpc, s);
	}
	if (rc) {
		s->state = STREAM_FAILED;
		s->reset = s->ended = true;
		s->err = ECONNREFUSED;
		stream_notify(s, EPOLLOUT | EPOLLERR | EPOLLHUP);
	}
	stream_put(s);
}

/* --- listeners --- */

static bool addr_is_any(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)(const void *)ss)->sin_addr.s_addr == 0;
	const struct sockaddr_in6 *in6 = (const void *)ss;
	return !memcmp(&in6->sin6_addr, &in6addr_any, sizeof(in6addr_any));
}

static bool listener_matches(const struct listener *l, const struct wire_addr *dst)
{
	if (l->port != dst->port)
		return false;
	if (addr_is_any(&l->addr))
		return l->addr.ss_family == AF_INET6 ? !l->v6only || dst->family == AF_INET6
						     : dst->family == AF_INET;
	struct sockaddr_storage ss;
	wire_to_addr(dst, l->addr.ss_family, &ss);
	if (l->addr.ss_family == AF_INET)
		return ((struct sockaddr_in *)(void *)&ss)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)(const void *)&l->addr)->sin_addr.s_addr;
	return !memcmp(&((struct sockaddr_in6 *)(void *)&ss)->sin6_addr,
		       &((const struct sockaddr_in6 *)(const void *)&l->addr)->sin6_addr, 16);
}

struct listener *listener_add(const struct sockaddr *addr, socklen_t len, int backlog,
			      struct ffile *file)
{
	struct listener *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	memcpy(&l->addr, addr, len);
	l->addr_len = len;
	l->port = addr->sa_family == AF_INET ? ((const struct sockaddr_in *)(const void *)addr)->sin_port
					     : ((const struct sockaddr_in6 *)(const void *)addr)->sin6_port;
	l->file = file;
	l->backlog = backlog;
	l->next = listeners;
	listeners = l;
	return l;
}

struct stream *listener_pop(struct listener *l)
{
	struct stream *s = l->head;
	if (!s)
		return NULL;
	l->head = s->accept_next;
	if (!l->head)
		l->tail = NULL;
	l->queued--;
	s->accept_next = NULL;
	if (!l->head && !l->offers)
		ffile_notify(l->file, 0, 0);
	return s;
}

struct listener *listener_find(const struct sockaddr *addr)
{
	uint16_t port = addr->sa_family == AF_INET
				? ((const struct sockaddr_in *)(const void *)addr)->sin_port
				: ((const struct sockaddr_in6 *)(const void *)addr)->sin6_port;
	for (struct listener *l = listeners; l; l = l->next)
		if (l->port == port && l->addr.ss_family == addr->sa_family)
			return l;
	return NULL;
}

int listener_offer_add(struct listener *l, const struct mgmt_offer *o)
{
	struct listener_offer *n = malloc(sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->o = *o;
	n->next = NULL;
	if (!l->offers)
		l->offers_tail = &l->offers;
	*l->offers_tail = n;
	l->offers_tail = &n->next;
	ffile_notify(l->file, EPOLLIN, EPOLLIN);
	return 0;
}

bool listener_offer_pop(struct listener *l, struct mgmt_offer *out)
{
	struct listener_offer *o = l->offers;
	if (!o)
		return false;
	l->offers = o->next;
	*out = o->o;
	free(o);
	if (!l->head && !l->offers)
		ffile_notify(l->file, 0, 0);
	return true;
}

void listener_remove(struct rpc *rpc, struct listener *l, const struct listener_keep *k)
{
	for (struct listener **p = &listeners; *p; p = &(*p)->next) {
		if (*p == l) {
			*p = l->next;
			break;
		}
	}
	if (l->shared) {
		struct wire_addr *g = &lis_gone[lis_gone_next++ % LISTENERS_GONE_MAX];
		addr_to_wire((const struct sockaddr *)&l->addr, g);
		if (addr_is_any(&l->addr))
			g->family = 0; /* any address of ours on that port */
	}
	struct stream *s;
	while ((s = listener_pop(l)) != NULL) {
		if (!s->reset && k && k->stream(s, k->arg))
			continue;
		if (!s->reset)
			stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, ctl_cont);
		s->reset = true;
		stream_put(s);
	}
	/* Offers not taken: handed on, or their owner resets them once
	 * nobody takes them. */
	struct mgmt_offer o;
	while (listener_offer_pop(l, &o))
		if (k && k->offer)
			k->offer(&o, k->arg);
	free(l);
}

/* --- request handlers --- */

static void respond(struct rpc *rpc, struct rpc_req *req, const void *body, uint32_t len)
{
	struct msgbuf *m = rpc_resp_msg(rpc, req, len);
	if (m) {
		memcpy(m->buf, body, len);
		msgbuf_resize(m, len);
	}
	/* Without a buffer the transport lets the requester retry; the handle
	 * must be given back either way. */
	rpc_respond(rpc, req);
}

static bool listener_gone(const struct wire_addr *dst)
{
	for (unsigned i = 0; i < LISTENERS_GONE_MAX; i++)
		if (lis_gone[i].port && lis_gone[i].port == dst->port &&
		    (lis_gone[i].family == 0 || !memcmp(lis_gone[i].addr, dst->addr, 16)))
			return true;
	return false;
}

static void handle_open(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	const struct msgbuf *m = rpc_req_msg(req);
	struct wire_open_resp r = {.status = -ECONNREFUSED};
	if (m->data_size < sizeof(struct wire_open)) {
		r.status = -EPROTO;
		respond(rpc, req, &r, sizeof(r));
		return;
	}
	const struct wire_open *w = (const void *)m->buf;
	struct listener *l = listeners;
	while (l && !listener_matches(l, &w->dst))
		l = l->next;
	if (!l && listener_gone(&w->dst))
		r.status = -ESTALE; /* it was shared: another holder answers */
	/* A full queue refuses, as a SYN flood guard would; the kernel's
	 * default somaxconn is the floor so small backlogs still work. */
	int limit = l && l->backlog > 4096 ? l->backlog : 4096;
	struct stream *s = l && l->queued < limit ? stream_alloc(rpc, rpc_req_session(req)) : NULL;
	if (s) {
		s->peer_sid = w->client_sid;
		s->peer_window = w->window;
		s->state = STREAM_OPEN;
		s->local_len = wire_to_addr(&w->dst, l->addr.ss_family, &s->local);
		s->peer_len = wire_to_addr(&w->src, l->addr.ss_family, &s->peer);
		if (l->tail)
			l->tail->accept_next = s;
		else
			l->head = s;
		l->tail = s;
		l->queued++;
		stats_inc(ferry_stats()->streams_accepted);
		r.status = 0;
		r.server_sid = s->sid;
		r.window = s->rx.cap;
		ffile_notify(l->file, EPOLLIN, EPOLLIN);
	}
	respond(rpc, req, &r, sizeof(r));
}

static void stream_put(struct stream *s);

unsigned stream_release_held(struct rpc *rpc)
{
	unsigned n = 0;
	struct stream **pp = &held_head;
	while (*pp) {
		struct stream *s = *pp;
		if (s->rpc != rpc) { /* another endpoint's (tests run two) */
			pp = &s->held_next;
			continue;
		}
		*pp = s->held_next;
		s->on_held = false;
		if (s->held) {
			stream_answer_held(rpc, s, 0, NULL, 0, 0);
			n++;
		}
		stream_put(s);
	}
	work_update();
	return n;
}

/* Sends a WINDOW for bytes that came in answers and that no request of
 * ours has acknowledged for STREAM_ACK_DELAY_NS (st_ack_delay_ns). */
static unsigned stream_pay_owed(struct rpc *rpc)
{
	unsigned n = 0;
	uint64_t now = 0;
	struct stream **pp = &owed_head;
	while (*pp) {
		struct stream *s = *pp;
		if (s->rpc != rpc) {
			pp = &s->owed_next;
			continue;
		}
		bool owed = s->rx_told != s->rx.tail && !s->reset && s->state == STREAM_OPEN &&
			    !s->moving;
		if (owed) {
			if (!now)
				now = clock_now_ns();
			if (now - s->owed_since < st_ack_delay_ns) {
				pp = &s->owed_next;
				continue;
			}
			if (stream_send_ctl(rpc, s, STREAM_REQ_WINDOW, s->rx.head, ctl_cont) == 0)
				n++;
		}
		*pp = s->owed_next;
		s->on_owed = false;
		stream_put(s);
	}
	return n;
}

/* Lets go of the closed streams whose peer kept its side open past the
 * FIN timeout (see st_fin_timeout_ns). */
static void stream_linger_expire(struct rpc *rpc)
{
	uint64_t now = linger_now_ns();
	if (now - st_linger_oldest < st_fin_timeout_ns)
		return;
	uint64_t oldest = UINT64_MAX;
	for (uint32_t i = 0; i < st_used; i++) {
		struct stream *s = st_slots[i];
		if (!s || !s->ph_wait)
			continue;
		if (s->rpc != rpc || now - s->closed_ns < st_fin_timeout_ns) {
			if (s->closed_ns < oldest)
				oldest = s->closed_ns;
			continue;
		}
		/* Not ended: stream_put closes the placeholder, no pool. */
		stream_linger_end(s);
	}
	if (st_nlinger)
		st_linger_oldest = oldest;
}

/* Resets the streams whose new owner never attached. */
static void stream_move_expire(void)
{
	uint64_t now = clock_now_ns();
	for (uint32_t i = 0; i < st_used; i++) {
		struct stream *s = st_slots[i];
		if (s && s->moving && s->move_cookie && now > s->move_deadline) {
			s->moving = false;
			s->move_cookie = 0;
			st_nmoving--;
			stream_fail(s, ECONNRESET);
		}
	}
}

unsigned stream_run_once(struct rpc *rpc)
{
	unsigned n = held_head ? stream_release_held(rpc) : 0;
	unsigned pkts = rpc_run_once(rpc);
	unsigned k = ack_npending;
	for (unsigned i = 0; i < k; i++) {
		struct stream *s = ack_pending[i].s;
		respond_ack(rpc, ack_pending[i].req, ack_pending[i].status, s);
		if (s)
			stream_put(s);
	}
	ack_npending = 0;
	n += k;
	if (owed_head)
		n += stream_pay_owed(rpc);
	if (st_linger_oldest != UINT64_MAX)
		stream_linger_expire(rpc);
	if (st_nmoving)
		stream_move_expire();

	if (n)
		__atomic_store_n(&st_tx_deferred, true, __ATOMIC_RELEASE);
	work_update();
	return pkts;
}

/* Queues the answer for after the pass (see stream_run_once). */
static void answer_later(struct rpc *rpc, struct rpc_req *req, struct stream *s, int status)
{
	if (ack_npending == ACK_PENDING_MAX) {
		respond_ack(rpc, req, status, s);
		return;
	}
	ack_pending[ack_npending].req = req;
	ack_pending[ack_npending].s = s;
	ack_pending[ack_npending].status = status;
	ack_npending++;
	if (s)
		s->refs++;
}

/* Holds a DATA answer for the application's reply (see stream_run_once). */
static void stream_hold(struct rpc *rpc, struct rpc_req *req, struct stream *s)
{
	if (s->held)
		stream_answer_held(rpc, s, 0, NULL, 0, 0); /* one per stream: the earlier goes now */
	s->held = req;
	if (!s->on_held) {
		s->on_held = true;
		s->refs++;
		s->held_next = held_head;
		held_head = s;
	}
	/* The application's next wait answers it (ferry_flush), or the
	 * progress thread once the application has been away for a tick;
	 * not "deferred", which would have that thread answer at once. */
	__atomic_store_n(&st_work, 1, __ATOMIC_RELAXED);
}

bool stream_tx_undelivered(void)
{
	for (uint32_t i = 0; i < st_used; i++) {
		struct stream *s = st_slots[i];
		if (s && s->state == STREAM_OPEN && s->tx_delivered < s->tx_seq)
			return true;
	}
	return false;
}

/* The segment a DATA, control or MOVE request opens with, or NULL when
 * the request is too short for one (answered -EPROTO). */
static const struct wire_seg *request_seg(struct rpc *rpc, struct rpc_req *req)
{
	const struct msgbuf *m = rpc_req_msg(req);
	if (m->data_size >= sizeof(struct wire_seg))
		return (const void *)m->buf;
	respond_ack(rpc, req, -EPROTO, NULL);
	return NULL;
}

static void handle_data(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	const struct msgbuf *m = rpc_req_msg(req);
	const struct wire_seg *w = request_seg(rpc, req);
	if (!w)
		return;
	struct stream *s = stream_lookup(w->sid, rpc_req_session(req));
	if (!s || s->reset) {
		respond_ack(rpc, req, -ECONNRESET, NULL);
		if (s) { /* closed here: the peer's stream ends on the refusal */
			s->ended = true;
			stream_unlinger(s);
		}
		return;
	}
	stream_heard(s, w->consumed, w->received);
	size_t len = m->data_size - sizeof(*w);
	/*
	 * One copy, here, as the kernel makes one. DESIGN.md hoped to hand the
	 * receive buffer itself to the stream, but rpc.h gives a request's
	 * msgbuf only for the handler's duration (the transport reassembles
	 * and recycles it), so keeping it would need a transport change.
	 */
	int rc = rxbuf_put(&s->rx, w->value, m->buf + sizeof(*w), len);
	if (rc) {
		log_warn("stream %u: DATA at %llu+%zu refused (%d): resetting", s->sid,
			 (unsigned long long)w->value, len, rc);
		stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, ctl_cont);
		stream_fail(s, ECONNRESET);
		respond_ack(rpc, req, -ECONNRESET, NULL);
		return;
	}
	stream_hold(rpc, req, s);
	stream_notify(s, EPOLLIN);
}

static void handle_ctl(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	const struct wire_seg *w = request_seg(rpc, req);
	if (!w)
		return;
	struct stream *s = stream_lookup(w->sid, rpc_req_session(req));
	uint8_t type = rpc_req_type(req);
	if (!s) {
		answer_later(rpc, req, NULL, type == STREAM_REQ_WINDOW ? -ECONNRESET : 0);
		return;
	}
	stream_heard(s, w->consumed, w->received);
	switch (type) {
	case STREAM_REQ_WINDOW:
		break;
	case STREAM_REQ_FIN:
		s->rx_fin = s->ended = true;
		s->fin_seq = w->value;
		stream_notify(s, EPOLLIN | EPOLLRDHUP);
		if (!s->reset && s->state == STREAM_OPEN) {
			stream_hold(rpc, req, s); /* our close (or reply) may ride in it */
			return;
		}
		break;
	case STREAM_REQ_RESET:
		stream_fail(s, ECONNRESET);
		break;
	}
	answer_later(rpc, req, s, 0);
	stream_unlinger(s);
}

static void stream_session_event(struct rpc *rpc, int session, enum rpc_session_event ev, int err,
				 void *ctx)
{
	if (ev == RPC_SESSION_UP)
		return;
	for (uint32_t i = 0; i < st_used; i++) {
		struct stream *s = st_slots[i];
		/* A peer that had shut its side (FIN) and sent everything before
		 * it went away closed cleanly: reads end in EOF, writes fail; no
		 * reset to report. Otherwise as stream_end_error says. A stream on its
		 * way to another session (redirected, or moving) is not this one's any
		 * more, and one the peer never answered goes there too. */
		if (s && s->session == session && !s->redirect && !stream_end_moving(s) &&
		    !stream_open_again(s)) {
			stream_fail(s, stream_end_error(s, err));
			stream_unlinger(s);
		}
	}
}

/* --- moving to another process --- */

/* ATTACH's body: the peer's id for the stream and the cookie (seg), then
 * the new owner's. */
struct wire_attach {
	struct wire_seg seg;
	uint32_t sid;
	uint32_t window;
};
_Static_assert(sizeof(struct wire_attach) == 40, "wire layout");

static void move_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct stream *s = ((struct stream_tx *)tag)->s;
	const struct wire_ack *a = status == 0 && resp->data_size >= sizeof(struct wire_ack)
					   ? (const void *)resp->buf
					   : NULL;
	if (a && a->status == 0) {
		s->move_acked = true;
		s->move_peer_tx = a->seq;
	} else if (a && a->status == -EAGAIN) {
		s->move_retry = true;
	} else {
		s->move_refused = true;
	}
	ctl_cont(rpc, status, resp, tag);
}

int stream_move_out(struct rpc *rpc, struct stream *s, uint64_t cookie)
{
	if (s->state != STREAM_OPEN || s->reset)
		return -ECONNRESET;
	s->move_acked = s->move_retry = s->move_refused = false;
	s->moving = true;
	if (s->held)
		stream_answer_held(rpc, s, 0, NULL, 0, 0);
	int rc = stream_send_ctl(rpc, s, STREAM_REQ_MOVE, cookie, move_cont);
	if (rc == 0)
		st_tx_pending = true;
	return rc;
}

bool stream_move_ready(const struct stream *s)
{
	return s->move_acked && s->rx.tail >= s->move_peer_tx && s->inflight == 0 && !s->held;
}

size_t stream_snapshot(const struct stream *s, struct stream_snap *snap, void *buf, size_t cap)
{
	memset(snap, 0, sizeof(*snap));
	snap->magic = STREAM_SNAP_MAGIC;
	snap->peer_sid = s->peer_sid;
	snap->peer_window = s->peer_window;
	snap->rx_fin = s->rx_fin;
	snap->rd_shut = s->rd_shut;
	snap->wr_shut = s->wr_shut;
	snap->fin_sent = s->fin_sent;
	snap->rx_head = s->rx.head;
	snap->rx_tail = s->rx.tail;
	snap->rx_advertised = s->rx_advertised;
	snap->rx_told = s->rx_told;
	snap->fin_seq = s->fin_seq;
	snap->tx_seq = s->tx_seq;
	snap->tx_acked = s->tx_acked;
	snap->tx_delivered = s->tx_delivered;
	snap->local = s->local;
	snap->local_len = s->local_len;
	snap->peer = s->peer;
	snap->peer_len = s->peer_len;
	struct iovec v = {.iov_base = buf, .iov_len = cap};
	return rxbuf_read((struct rxbuf *)&s->rx, &v, 1, true);
}

void stream_detach(struct stream *s)
{
	s->file = NULL;
	s->reset = true; /* off the owed list at its next walk */
	s->state = STREAM_FAILED;
	s->ended = false; /* a bound placeholder is closed, not pooled */
	stream_put(s);
}

unsigned stream_count(void)
{
	return st_used - st_nfree;
}

void stream_orphan(struct stream *s)
{
	s->file = NULL;
}

struct stream *stream_find(uint32_t sid, uint32_t peer_sid, uint64_t token)
{
	uint32_t idx = sid & SID_INDEX_MASK;
	if (idx >= st_used)
		return NULL;
	struct stream *s = st_slots[idx];
	if (!s || s->sid != sid || s->peer_sid != peer_sid || s->token != token)
		return NULL;
	return s;
}

static void attach_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct stream *s = ((struct stream_tx *)tag)->s;
	const struct wire_ack *a = status == 0 && resp->data_size >= sizeof(struct wire_ack)
					   ? (const void *)resp->buf
					   : NULL;
	s->attaching = false;
	if (!a || a->status != 0) {
		log_debug("stream %u: the peer refused ATTACH (%d/%d)", s->sid, status,
			  a ? a->status : 0);
		stream_fail(s, ECONNRESET);
	}
	ctl_cont(rpc, status, resp, tag);
	stream_notify(s, EPOLLOUT);
}

int stream_restore(struct rpc *rpc, int session, const struct stream_snap *snap,
		   const void *bytes, size_t len, struct ffile *file, struct stream **out)
{
	if (snap->magic != STREAM_SNAP_MAGIC || snap->rx_tail - snap->rx_head != len ||
	    len > STREAM_WINDOW || snap->local_len > sizeof(snap->local) ||
	    snap->peer_len > sizeof(snap->peer))
		return -EPROTO;
	struct stream *s = stream_alloc(rpc, session);
	if (!s)
		return -ENOMEM;
	s->peer_sid = snap->peer_sid;
	s->peer_window = snap->peer_window;
	s->state = STREAM_OPEN;
	s->established = true;
	s->rx_fin = snap->rx_fin;
	s->ended = snap->rx_fin;
	s->rd_shut = snap->rd_shut;
	s->wr_shut = snap->wr_shut;
	s->fin_sent = snap->fin_sent;
	s->fin_seq = snap->fin_seq;
	s->rx.head = s->rx.tail = snap->rx_head;
	if (len && rxbuf_put(&s->rx, snap->rx_head, bytes, len) != 0) {
		stream_put(s);
		return -ENOMEM;
	}
	s->rx_advertised = snap->rx_advertised;
	s->rx_told = snap->rx_told;
	s->tx_seq = snap->tx_seq;
	s->tx_acked = snap->tx_acked;
	s->tx_delivered = snap->tx_delivered;
	s->local = snap->local;
	s->local_len = snap->local_len;
	s->peer = snap->peer;
	s->peer_len = snap->peer_len;
	s->file = file;
	struct stream_tx *tx = calloc(1, sizeof(*tx));
	struct msgbuf *m = tx ? rpc_alloc_msg(rpc, sizeof(struct wire_attach)) : NULL;
	if (!m) {
		free(tx);
		stream_put(s);
		return -ENOMEM;
	}
	struct wire_attach *w = (void *)m->buf;
	*w = (struct wire_attach){.seg = {.sid = snap->peer_sid, .value = snap->cookie},
				  .sid = s->sid,
				  .window = s->rx.cap};
	stream_tell(s, &w->seg.consumed, &w->seg.received);
	tx->s = s;
	tx->m = m;
	int rc = rpc_enqueue_request(rpc, session, STREAM_REQ_ATTACH, m, attach_cont, tx);
	if (rc) {
		rpc_free_msg(rpc, m);
		free(tx);
		stream_put(s);
		return rc;
	}
	s->refs++;
	s->inflight++;
	s->attaching = true;
	st_tx_pending = true;
	*out = s;
	return 0;
}

static void handle_move(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	const struct wire_seg *w = request_seg(rpc, req);
	if (!w)
		return;
	struct stream *s = stream_lookup(w->sid, rpc_req_session(req));
	if (!s || s->reset || s->state != STREAM_OPEN || w->value == 0) {
		respond_ack(rpc, req, -ECONNRESET, NULL);
		return;
	}
	stream_heard(s, w->consumed, w->received);
	if (!s->moving)
		st_nmoving++;
	s->moving = true;
	s->move_cookie = w->value;
	s->move_deadline = clock_now_ns() + STREAM_MOVE_TIMEOUT_NS;
	if (s->held)
		stream_answer_held(rpc, s, 0, NULL, 0, 0);
	/* The owner asks again once our requests in flight are answered, so
	 * that what it hands over is all we sent. */
	respond_ack(rpc, req, s->inflight ? -EAGAIN : 0, s);
	stream_notify(s, 0);
}

static void handle_attach(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	const struct msgbuf *m = rpc_req_msg(req);
	if (m->data_size < sizeof(struct wire_attach)) {
		respond_ack(rpc, req, -EPROTO, NULL);
		return;
	}
	const struct wire_attach *w = (const void *)m->buf;
	uint32_t idx = w->seg.sid & SID_INDEX_MASK;
	struct stream *s = idx < st_used ? st_slots[idx] : NULL;
	if (!s || s->sid != w->seg.sid || !s->moving || s->move_cookie != w->seg.value) {
		log_debug("stream %u: ATTACH refused (%s)", w->seg.sid,
			  !s || s->sid != w->seg.sid ? "no such stream" : "not moving");
		respond_ack(rpc, req, -ECONNREFUSED, NULL);
		return;
	}
	int session = rpc_req_session(req);
	s->session = session;
	s->token = rpc_session_token(rpc, session);
	s->peer_sid = w->sid;
	s->peer_window = w->window;
	s->moving = false;
	st_nmoving--;
	s->move_cookie = 0;
	stream_heard(s, w->seg.consumed, w->seg.received);
	respond_ack(rpc, req, 0, s);
	if (s->move_reset)
		stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, ctl_cont);
	else if (s->move_fin)
		stream_send_ctl(rpc, s, STREAM_REQ_FIN, s->tx_seq, ctl_cont);
	s->move_fin = s->move_reset = false;
	stream_notify(s, EPOLLOUT);
}

int stream_init(struct rpc *rpc)
{
	int rc = rpc_register_handler(rpc, STREAM_REQ_OPEN, handle_open, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_DATA, handle_data, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_WINDOW, handle_ctl, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_FIN, handle_ctl, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_RESET, handle_ctl, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_MOVE, handle_move, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_ATTACH, handle_attach, NULL);
	if (rc)
		return rc;
	fin_timeout_read();
	rpc_set_session_handler(rpc, stream_session_event, NULL);
	return 0;
}
