/* Streams: the table of this process's streams, their readiness, and how
 * they end. The protocol's other parts are in stream_data.c (the data
 * path), stream_open.c, stream_move.c and listener.c. */
#include "autoconfig.h"

#include "preload/stream_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "preload/phpool.h"
#include "transport/clock.h"
#include "transport/sys.h"

struct stream_table streams;
uint32_t stream_forks;
static stream_ready_fn *ready_fn;

/*
 * A closed stream keeps its port (ph_wait) until the peer's side ends, and
 * itself until the peer has all it wrote (stream_linger_over). One
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
	return __atomic_load_n(&streams.tx_deferred, __ATOMIC_ACQUIRE);
}

void stream_tx_deferred_clear(void)
{
	__atomic_store_n(&streams.tx_deferred, false, __ATOMIC_RELEASE);
}

bool stream_work_pending(void)
{
	return __atomic_load_n(&streams.work, __ATOMIC_RELAXED) != 0;
}

bool stream_held_pending(void)
{
	return __atomic_load_n(&streams.nheld, __ATOMIC_RELAXED) != 0;
}

void stream_work_update(void)
{
	/* A stream moving at the peer's word counts too: its deadline must be
	 * checked even while nothing else wakes this process. */
	__atomic_store_n(&streams.work,
			 streams.held_head || streams.owed_head || streams.redirect_head ||
				 streams.nmoving,
			 __ATOMIC_RELAXED);
}

bool stream_take_tx_pending(void)
{
	bool p = streams.tx_pending;
	streams.tx_pending = false;
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
	ssize_t n = sys()->read(fd, buf, sizeof(buf) - 1);
	sys()->close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	char *end;
	unsigned long sec = strtoul(buf, &end, 10);
	if (end != buf && sec > 0 && sec < 24ul * 3600)
		st_fin_timeout_ns = (uint64_t)sec * 1000000000ull;
}

void stream_test_set_fin_timeout(uint64_t ns)
{
	st_fin_timeout_set = true;
	st_fin_timeout_ns = ns;
}

/* --- table --- */

/* A new stream of this process on rpc's session (one reference). */
struct stream *stream_alloc(struct rpc *rpc, int session)
{
	if (streams.nfree == 0 && streams.used == streams.cap) {
		uint32_t cap = streams.cap ? streams.cap * 2 : 256;
		if (cap > SID_INDEX_MASK + 1)
			return NULL;
		struct stream **ns = realloc(streams.slots, cap * sizeof(*ns));
		if (!ns)
			return NULL;
		streams.slots = ns;
		uint16_t *ng = realloc(streams.gen, cap * sizeof(*ng));
		if (!ng)
			return NULL;
		streams.gen = ng;
		uint32_t *nf = realloc(streams.free, cap * sizeof(*nf));
		if (!nf)
			return NULL;
		streams.free = nf;
		memset(streams.slots + streams.cap, 0, (cap - streams.cap) * sizeof(*ns));
		memset(streams.gen + streams.cap, 0, (cap - streams.cap) * sizeof(*ng));
		streams.cap = cap;
	}
	struct stream *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	uint32_t idx = streams.nfree ? streams.free[--streams.nfree] : streams.used++;
	streams.gen[idx] = (uint16_t)((streams.gen[idx] + 1) & 0xfff);
	s->sid = ((uint32_t)streams.gen[idx] << SID_INDEX_BITS) | idx;
	streams.slots[idx] = s;
	rxbuf_init(&s->rx, STREAM_WINDOW);
	s->refs = 1;
	s->ph_fd = -1;
	s->born_fork = stream_forks;
	s->rpc = rpc;
	s->session = session;
	s->token = rpc_session_token(rpc, session);
	return s;
}

struct stream *stream_lookup(uint32_t sid, int session)
{
	uint32_t idx = sid & SID_INDEX_MASK;
	if (idx >= streams.used)
		return NULL;
	struct stream *s = streams.slots[idx];
	if (!s || s->sid != sid || s->session != session)
		return NULL;
	return s;
}

void stream_put(struct stream *s)
{
	if (--s->refs > 0)
		return;
	stream_timed_forget(s);
	uint32_t idx = s->sid & SID_INDEX_MASK;
	if (idx < streams.cap && streams.slots[idx] == s) {
		streams.slots[idx] = NULL;
		streams.free[streams.nfree++] = idx;
	}
	if (s->ph_fd >= 0) {
		if (s->ended)
			phpool_give_bound(s->ph_fd, &s->local, s->local_len);
		else
			sys()->close(s->ph_fd);
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

/* Writable once the free room is at least half of what the peer has yet to
 * read, so a writer that filled the window is woken for a third of it, not
 * once for every packet its reader frees. */
bool stream_tx_writable(const struct stream *s)
{
	size_t space = stream_tx_space(s);
	return space > 0 && space >= (size_t)(s->tx_seq - s->tx_acked) / 2;
}

size_t stream_tx_queued(const struct stream *s)
{
	/* As SIOCOUTQ: sent and not yet acknowledged as received. */
	return (size_t)(s->tx_seq - s->tx_delivered);
}

bool stream_fin_in(const struct stream *s)
{
	return s->rx_fin && s->rx.tail >= s->fin_seq;
}

bool stream_eof(const struct stream *s)
{
	return stream_fin_in(s) || s->rd_shut;
}

uint32_t stream_mask(const struct stream *s)
{
	if (s->state == STREAM_OPENING)
		return 0;
	if (s->write_draws_reset) /* CLOSE_WAIT as tcp_poll shows it */
		return EPOLLIN | EPOLLRDHUP | EPOLLOUT;
	if (s->state == STREAM_FAILED || s->reset) {
		uint32_t m = EPOLLIN | EPOLLOUT | EPOLLHUP | EPOLLRDHUP;
		return s->err ? m | EPOLLERR : m;
	}
	if (s->relayed)
		return 0;
	uint32_t m = 0;
	/* As tcp_poll: readable from SO_RCVLOWAT's bytes, one more where the
	 * urgent byte waits out of line. */
	size_t target = (s->rcvlowat ? s->rcvlowat : 1) + (stream_urgent_hides_byte(s) ? 1u : 0u);
	if (rxbuf_avail(&s->rx) >= target || stream_eof(s))
		m |= EPOLLIN;
	if (s->urg == STREAM_URG_VALID)
		m |= EPOLLPRI;
	if (s->zc_done) /* as sock_poll: the error queue holds a notice */
		m |= EPOLLERR;
	if (stream_eof(s))
		m |= EPOLLRDHUP;
	/* As tcp_poll: a shut write side polls writable (the write fails). */
	if (s->wr_shut || stream_tx_writable(s))
		m |= EPOLLOUT;
	if (stream_eof(s) && s->wr_shut)
		m |= EPOLLHUP;
	return m;
}

void stream_set_rcvlowat(struct stream *s, uint32_t lowat)
{
	uint32_t most = s->rx.cap / 2;
	lowat = lowat < most ? lowat : most;
	if (lowat == s->rcvlowat)
		return;
	bool was = stream_mask(s) & EPOLLIN;
	s->rcvlowat = lowat;
	bool now = stream_mask(s) & EPOLLIN;
	stream_notify(s, now && !was ? EPOLLIN : 0);
}

bool stream_read_short(const struct stream *s, size_t need)
{
	if (s->state != STREAM_OPEN || s->reset || s->err || stream_eof(s))
		return false;
	if (s->urg != STREAM_URG_NONE && s->urg_seq >= s->rx.head)
		return false; /* the read stops at the mark whatever it asked */
	return rxbuf_avail(&s->rx) < need;
}

void stream_relay_mark(struct stream *s, bool on)
{
	if (on) {
		s->relayed++;
	} else if (s->relayed && --s->relayed == 0) {
		stream_notify(s, EPOLLIN | EPOLLOUT); /* the application's turn again */
	}
}

void stream_ready(struct ffile *file, uint32_t mask, uint32_t events)
{
	if (file && ready_fn)
		ready_fn(file, mask, events);
}

void stream_notify(struct stream *s, uint32_t events)
{
	if (s->file)
		stream_ready(s->file, stream_mask(s), events);
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

/* A closed stream lingers (ph_wait) for its port until the peer's side
 * ends, and for what it sent until the peer has it: the last reply, or the
 * FIN, may ride in an answer, which only the peer's retransmission of its
 * request brings again once lost, and only while this process is there to
 * answer. The exit drain waits for the bytes (stream_tx_undelivered) and
 * sends such a FIN again as a request (stream_fin_all); the peer's side
 * ending says it had the FIN. */
static bool stream_linger_over(const struct stream *s)
{
	if (!rpc_session_is_up(s->rpc, s->session))
		return true;
	if (s->ended && !s->rx_fin) /* reset or refused: nothing more arrives */
		return true;
	if (s->tx_delivered < s->tx_seq)
		return false;
	return s->ended || (s->ph_fd < 0 && !s->fin_in_answer);
}

void stream_unlinger(struct stream *s)
{
	if (s->ph_wait && stream_linger_over(s))
		stream_linger_end(s);
}

void stream_fail(struct stream *s, int err)
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

void stream_tell(struct stream *s, uint64_t *consumed, uint64_t *received)
{
	*consumed = s->rx_advertised = s->rx.head;
	*received = s->rx_told = s->rx.tail;
}

void stream_heard(struct stream *s, uint64_t consumed, uint64_t received)
{
	bool moved = received > s->tx_delivered && received <= s->tx_seq;
	if (moved)
		s->tx_delivered = received;
	stream_timed_heard(s, moved);
	if (consumed > s->tx_acked && consumed <= s->tx_seq) {
		/* As TCP's write space: an event only where the stream turns
		 * writable; writable before and after, nothing changed. */
		bool was = stream_tx_writable(s);
		s->tx_acked = consumed;
		if (!was && stream_tx_writable(s))
			stream_notify(s, EPOLLOUT);
	}
}

void stream_close(struct rpc *rpc, struct stream *s)
{
	s->file = NULL;
	if (s->state == STREAM_OPEN && !s->reset) {
		/* As TCP: closing with unread data resets the connection. */
		if (rxbuf_avail(&s->rx) > 0) {
			if (stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, stream_ctl_cont) == 0)
				s->ended = true;
		} else if (!s->fin_sent && stream_send_fin(rpc, s) == 0) {
			s->fin_sent = true;
		}
	}
	s->wr_shut = s->rd_shut = true;
	s->reset = true; /* nothing more for the application */
	/* The port stays ours until the peer's side ended too: the peer's
	 * application may hold its end of the connection for a while yet, and
	 * no new connection may show the same pair of addresses meanwhile. The
	 * stream stays until the peer has what it sent (stream_linger_over). */
	if (!s->ph_wait && !stream_linger_over(s)) {
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
	    stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, stream_ctl_cont) == 0)
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
	for (uint32_t i = 0; i < streams.used; i++) {
		struct stream *s = streams.slots[i];
		if (s && s->ph_fd >= 0) {
			sys()->close(s->ph_fd);
			s->ph_fd = -1;
		}
	}
}

void stream_forget_all(void)
{
	for (uint32_t i = 0; i < streams.used; i++) {
		struct stream *s = streams.slots[i];
		if (!s)
			continue;
		rxbuf_abandon(&s->rx); /* kept buffers are the old endpoint's */
		free(s);
	}
	free(streams.slots);
	free(streams.gen);
	free(streams.free);
	streams.slots = NULL;
	streams.gen = NULL;
	streams.free = NULL;
	streams.cap = streams.used = streams.nfree = 0;
	stream_data_forget();
	streams.held_head = streams.owed_head = NULL;
	streams.nheld = 0;
	st_linger_oldest = UINT64_MAX;
	st_nlinger = 0;
	streams.nmoving = 0;
	streams.ntimed = 0;
	streams.redirect_head = NULL;
	stream_work_update();
	rxbuf_spares_release();
	listener_forget_all();
}

void stream_fin_all(struct rpc *rpc)
{
	for (uint32_t i = 0; i < streams.used; i++) {
		struct stream *s = streams.slots[i];
		if (!s || s->rpc != rpc)
			continue;
		if (s->file && s->state == STREAM_OPEN && !s->reset && !s->fin_sent &&
		    stream_send_fin(rpc, s) == 0)
			s->fin_sent = true;
		/* A lost answer that carried it is lost for good once we are
		 * gone: the peer would read a reset where it should read EOF. */
		if (s->fin_in_answer && s->state == STREAM_OPEN && rpc_session_is_up(rpc, s->session) &&
		    stream_send_ctl(rpc, s, STREAM_REQ_FIN, s->tx_seq, stream_ctl_cont) == 0)
			s->fin_in_answer = false;
	}
}

/* Lets go of the closed streams whose peer kept its side open past the
 * FIN timeout (see st_fin_timeout_ns). */
static void stream_linger_expire(struct rpc *rpc)
{
	uint64_t now = linger_now_ns();
	if (now - st_linger_oldest < st_fin_timeout_ns)
		return;
	uint64_t oldest = UINT64_MAX;
	for (uint32_t i = 0; i < streams.used; i++) {
		struct stream *s = streams.slots[i];
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
	for (uint32_t i = 0; i < streams.used; i++) {
		struct stream *s = streams.slots[i];
		if (s && s->moving && s->move_cookie && now > s->move_deadline) {
			s->moving = false;
			s->move_cookie = 0;
			streams.nmoving--;
			stream_fail(s, ECONNRESET);
		}
	}
}

void stream_expire(struct rpc *rpc)
{
	if (streams.ntimed)
		stream_timed_check(rpc);
	if (st_linger_oldest != UINT64_MAX)
		stream_linger_expire(rpc);
	if (streams.nmoving)
		stream_move_expire();
}

bool stream_tx_undelivered(void)
{
	for (uint32_t i = 0; i < streams.used; i++) {
		struct stream *s = streams.slots[i];
		/* Bytes for a peer that is gone will never be delivered. */
		if (s && s->state == STREAM_OPEN && s->tx_delivered < s->tx_seq &&
		    !rpc_session_peer_gone(s->rpc, s->session))
			return true;
	}
	return false;
}

bool stream_delivery_pending(const struct rpc *rpc)
{
	return rpc_busy_with_live_peers(rpc) || stream_tx_undelivered();
}

static void stream_session_event(struct rpc *rpc, int session, enum rpc_session_event ev, int err,
				 void *ctx)
{
	if (ev == RPC_SESSION_UP)
		return;
	for (uint32_t i = 0; i < streams.used; i++) {
		struct stream *s = streams.slots[i];
		/* A peer that had shut its side (FIN) and sent everything before
		 * it went away closed cleanly: reads end in EOF, writes fail; no
		 * reset to report. Otherwise as stream_end_error says. A stream on its
		 * way to another session (redirected, or moving) is not this one's any
		 * more, and one the peer never answered goes there too. */
		if (s && s->session == session && !s->redirect && !stream_end_moving(s) &&
		    !stream_open_again(s)) {
			stream_end(s, err);
			stream_unlinger(s);
		}
	}
}

void stream_detach(struct stream *s)
{
	s->file = NULL;
	s->reset = true; /* off the owed list at its next walk */
	s->state = STREAM_FAILED;
	s->ended = false; /* a bound placeholder is closed, not pooled */
	s->end_clean = false; /* handed over: no second holder takes its bytes again */
	stream_put(s);
}

unsigned stream_count(void)
{
	return streams.used - streams.nfree;
}

static enum stream_stat_state stream_stat_state(const struct stream *s)
{
	/* stream_close shuts both sides and marks the stream reset (nothing
	 * more for the application): closed, not reset by the peer. */
	if (!s->file && s->rd_shut && s->wr_shut)
		return STREAM_STAT_CLOSING;
	if (s->state == STREAM_FAILED || s->reset)
		return STREAM_STAT_RESET;
	if (s->moving || s->attaching)
		return STREAM_STAT_MOVING;
	if (s->state == STREAM_OPENING)
		return STREAM_STAT_OPENING;
	if (!s->file) /* no file yet: in an accept queue (or kept for a taker) */
		return STREAM_STAT_QUEUED;
	if (s->rx_fin || s->rd_shut || s->wr_shut)
		return STREAM_STAT_HALF_CLOSED;
	return STREAM_STAT_OPEN;
}

size_t stream_stat_fill(struct stream_stat *out, size_t cap)
{
	size_t n = 0;
	for (uint32_t i = 0; i < streams.used; i++) {
		const struct stream *s = streams.slots[i];
		if (!s)
			continue;
		if (n < cap)
			out[n] = (struct stream_stat){
				.sid = s->sid,
				.session = s->session,
				.state = stream_stat_state(s),
				.local = s->local,
				.peer = s->peer,
				.bytes_tx = s->tx_seq,
				.bytes_rx = s->rx.tail,
				.unread = rxbuf_avail(&s->rx),
				.unacked = stream_tx_queued(s),
			};
		n++;
	}
	return n;
}

void stream_orphan(struct stream *s)
{
	s->file = NULL;
}

struct stream *stream_find(uint32_t sid, uint32_t peer_sid, uint64_t token)
{
	uint32_t idx = sid & SID_INDEX_MASK;
	if (idx >= streams.used)
		return NULL;
	struct stream *s = streams.slots[idx];
	if (!s || s->sid != sid || s->peer_sid != peer_sid || s->token != token)
		return NULL;
	return s;
}

_Static_assert(sizeof(struct wire_seg) <= RPC_PLACE_HEAD_MAX, "DATA's header goes to its placer");

int stream_init(struct rpc *rpc, stream_ready_fn *ready)
{
	ready_fn = ready;
	int rc = rpc_register_handler(rpc, STREAM_REQ_OPEN, stream_handle_open, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_DATA, stream_handle_data, NULL);
	if (!rc)
		rc = rpc_register_placer(rpc, STREAM_REQ_DATA, stream_place_data,
					 sizeof(struct wire_seg));
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_WINDOW, stream_handle_ctl, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_FIN, stream_handle_ctl, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_RESET, stream_handle_ctl, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_MOVE, stream_handle_move, NULL);
	if (!rc)
		rc = rpc_register_handler(rpc, STREAM_REQ_ATTACH, stream_handle_attach, NULL);
	if (rc)
		return rc;
	fin_timeout_read();
	stream_data_init();
	rpc_set_session_handler(rpc, stream_session_event, NULL);
	return 0;
}
