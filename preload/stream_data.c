/* The stream data path: DATA and its answers, which carry the other
 * side's reply and acknowledgements, WINDOW, FIN and RESET. */
#include "autoconfig.h"

#include "preload/stream_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "preload/ferry.h"
#include "transport/clock.h"
#include "transport/copy.h"
#include "transport/log.h"

/* How long bytes that came in an answer may go unacknowledged before a
 * WINDOW says so: long enough that the application's next request (a
 * client's usual next move) carries it, short against SIOCOUTQ pollers. */
#define STREAM_ACK_DELAY_NS (1000ull * 1000ull)
static uint64_t st_ack_delay_ns = STREAM_ACK_DELAY_NS;

void stream_test_set_ack_delay(uint64_t ns)
{
	st_ack_delay_ns = ns;
}

/* DATA requests waiting for their answer (see stream_run_once). */
#define ACK_PENDING_MAX 256
static struct {
	struct rpc_req *req;
	struct stream *s; /* referenced; NULL for an unknown stream */
	int status;
} ack_pending[ACK_PENDING_MAX];
static unsigned ack_npending;

/*
 * Every request takes a record and its answer gives it back: spares kept
 * under the endpoint lock spare malloc and free that round trip.
 */
#define STREAM_TX_SPARE_MAX 256
static struct stream_tx *tx_spare;
static unsigned tx_nspare;

void stream_data_forget(void)
{
	ack_npending = 0;
	while (tx_spare) {
		struct stream_tx *tx = tx_spare;
		tx_spare = tx->next_spare;
		free(tx);
	}
	tx_nspare = 0;
}

/*
 * Received bytes in packets at least this large stay in the packet's
 * buffer until read (rxbuf_keep): the reader's copy is their only one.
 * A smaller packet's copy costs less than holding its buffer.
 */
#define STREAM_KEEP_MIN 1024u

static void stream_rx_release(void *owner, void *buf)
{
	rpc_release_rx(owner, buf);
}

void stream_data_init(void)
{
	rxbuf_set_release(stream_rx_release);
}

/* Stores len received bytes at seq: kept where they landed when it can,
 * else copied into the ring. */
static int stream_rx_put(struct rpc *rpc, struct stream *s, uint64_t seq, const uint8_t *data,
			 size_t len)
{
	/* At the endpoint's limit, no record of kept packets is taken. */
	if (len >= STREAM_KEEP_MIN && rpc_rx_kept(rpc) < rpc_rx_keep_max(rpc) &&
	    rxbuf_keep_ready(&s->rx, seq, len, rpc)) {
		void *buf = rpc_keep_rx(rpc, data, len);
		if (buf) {
			rxbuf_keep(&s->rx, data, len, buf);
			return 0;
		}
	}
	return rxbuf_put(&s->rx, seq, data, len);
}

/* --- sending --- */

static void stream_owe(struct stream *s, bool was_told)
{
	if (was_told)
		s->owed_since = clock_now_ns();
	if (s->on_owed)
		return;
	s->on_owed = true;
	s->refs++;
	s->owed_next = streams.owed_head;
	streams.owed_head = s;
	__atomic_store_n(&streams.work, 1, __ATOMIC_RELAXED);
}

/* Bytes the peer sent in an answer (its reply to our DATA). */
static void stream_take_bytes(struct rpc *rpc, struct stream *s, const struct wire_ack *a,
			      size_t len)
{
	if (s->reset || s->state != STREAM_OPEN) {
		/* Nothing more for the application. Closed here: the writer is
		 * reset, as TCP resets data sent to a closed socket (and as
		 * stream_handle_data refuses DATA). */
		if (!s->file && !s->ended && s->state == STREAM_OPEN &&
		    stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, stream_ctl_cont) == 0)
			s->ended = true;
		return;
	}
	bool was_told = s->rx_told == s->rx.tail;
	int rc = stream_rx_put(rpc, s, a->seq, (const uint8_t *)(a + 1), len);
	if (rc) {
		log_warn("stream %u: answer bytes at %llu+%zu refused (%d): resetting", s->sid,
			 (unsigned long long)a->seq, len, rc);
		stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, stream_ctl_cont);
		stream_fail(s, ECONNRESET);
		return;
	}
	stream_owe(s, was_told);
	if ((a->flags & ACK_URG) && len)
		stream_urgent_arrived(s, a->seq + len - 1);
	stream_notify(s, EPOLLIN);
}

void stream_ctl_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct stream_tx *tx = tag;
	rpc_free_msg(rpc, tx->m);
	struct stream *s = tx->s;
	stream_tx_free(tx);
	s->inflight--;
	const struct wire_ack *a = stream_ack_of(status, resp);
	if (a) {
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

struct stream_tx *stream_tx_new(struct rpc *rpc, struct stream *s, uint32_t len)
{
	struct stream_tx *tx = tx_spare;
	if (tx) {
		tx_spare = tx->next_spare;
		tx_nspare--;
	} else if (!(tx = malloc(sizeof(*tx)))) {
		return NULL;
	}
	*tx = (struct stream_tx){.s = s, .m = rpc_alloc_msg(rpc, len)};
	if (!tx->m) {
		stream_tx_free(tx);
		return NULL;
	}
	return tx;
}

void stream_tx_free(struct stream_tx *tx)
{
	if (tx_nspare >= STREAM_TX_SPARE_MAX) {
		free(tx);
		return;
	}
	tx->next_spare = tx_spare;
	tx_spare = tx;
	tx_nspare++;
}

int stream_tx_send(struct rpc *rpc, struct stream_tx *tx, uint8_t type, rpc_cont_fn cont)
{
	struct stream *s = tx->s;
	int rc = rpc_enqueue_request(rpc, s->session, type, tx->m, cont, tx);
	if (rc) {
		rpc_free_msg(rpc, tx->m);
		stream_tx_free(tx);
		return rc;
	}
	s->refs++;
	s->inflight++;
	return 0;
}

int stream_send_ctl(struct rpc *rpc, struct stream *s, uint8_t type, uint64_t value,
		    rpc_cont_fn cont)
{
	if (s->moving && type != STREAM_REQ_MOVE) {
		/* Nothing goes to the old owner: the new one hears it once it
		 * attached (a WINDOW is said by the next message anyway). */
		s->move_fin |= type == STREAM_REQ_FIN;
		s->move_reset |= type == STREAM_REQ_RESET;
		return 0;
	}
	struct stream_tx *tx = stream_tx_new(rpc, s, sizeof(struct wire_seg));
	if (!tx)
		return -ENOMEM;
	struct wire_seg *w = (void *)tx->m->buf;
	*w = (struct wire_seg){.sid = s->peer_sid, .value = value};
	stream_tell(s, &w->consumed, &w->received);
	int rc = stream_tx_send(rpc, tx, type, cont);
	if (rc)
		return rc;
	/* A FIN waits for the application's next wait, as DATA does, so the
	 * closes of one pass of its loop leave in one batch with its other
	 * requests (a new connection's OPEN, say). */
	if (type == STREAM_REQ_FIN)
		stream_defer_tx();
	else
		streams.tx_pending = true;
	return 0;
}

static void data_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct stream_tx *tx = tag;
	struct stream *s = tx->s;
	const struct wire_ack *a = stream_ack_of(status, resp);
	if (a && a->status < 0)
		status = a->status;
	else if (!a && status == 0)
		status = -EPROTO;
	if (status < 0)
		stream_fail(s, ECONNRESET);
	stream_ctl_cont(rpc, status, status == 0 ? resp : NULL, tag);
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
		copy_bytes(dst + done, (const uint8_t *)iov[i].iov_base + skip, n);
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

void stream_respond_ack(struct rpc *rpc, struct rpc_req *req, int status, struct stream *s)
{
	stream_answer(rpc, req, s, status, 0, NULL, 0, 0);
}

/* Answers the peer's held DATA or FIN (see stream_answer). */
bool stream_answer_held(struct rpc *rpc, struct stream *s, uint32_t flags,
			       const struct iovec *iov, int iovcnt, size_t len)
{
	struct rpc_req *req = s->held;
	s->held = NULL;
	if (req)
		__atomic_sub_fetch(&streams.nheld, 1, __ATOMIC_RELAXED);
	return stream_answer(rpc, req, s, 0, flags, iov, iovcnt, len);
}

/* Shuts our side: in the held answer when there is one, else as a FIN
 * request. 0 or -errno. */
int stream_send_fin(struct rpc *rpc, struct stream *s)
{
	if (!s->held || !stream_answer_held(rpc, s, ACK_FIN, NULL, 0, 0))
		return stream_send_ctl(rpc, s, STREAM_REQ_FIN, s->tx_seq, stream_ctl_cont);
	s->fin_in_answer = true;
	stream_defer_tx();
	return 0;
}

/* Sends the first bytes of a write inside the answer to the peer's held
 * DATA: one packet's worth, no more, since a longer answer costs the
 * peer a round trip per packet (RFRs) where DATA streams. Returns the
 * bytes sent; when they are all of len and urgent, the last is marked. */
static size_t stream_send_in_answer(struct rpc *rpc, struct stream *s, const struct iovec *iov,
				    int iovcnt, size_t len, bool urgent)
{
	uint32_t room = rpc_max_pkt_data(rpc);
	room = room > sizeof(struct wire_ack) ? room - (uint32_t)sizeof(struct wire_ack) : 0;
	uint32_t flags = urgent && len <= room ? ACK_URG : 0;
	if (len > room)
		len = room;
	if (len == 0 || !stream_answer_held(rpc, s, flags, iov, iovcnt, len))
		return 0;
	stream_timed_sent(s);
	s->tx_seq += len;
	stream_defer_tx();
	return len;
}

/*
 * The bytes a DATA request carries when more follow: STREAM_DATA_MAX, less
 * what would spill into a last, short packet. Requests of whole packets
 * leave as one run of equal packets (one segmented send on udp), where a
 * short tail cost a packet and a send of its own and broke the next run.
 */
static size_t stream_data_max(const struct rpc *rpc, const struct stream *s)
{
	size_t dpp = rpc_session_pkt_data(rpc, s->session);
	size_t whole = (sizeof(struct wire_seg) + STREAM_DATA_MAX) / dpp * dpp;
	return whole > sizeof(struct wire_seg) ? whole - sizeof(struct wire_seg) : STREAM_DATA_MAX;
}

ssize_t stream_send_flags(struct rpc *rpc, struct stream *s, const struct iovec *iov, int iovcnt,
			  int flags)
{
	/* As tcp_mark_urg: the urgent pointer follows the last byte this
	 * call queues, however far the window let it go. */
	bool urgent = flags & MSG_OOB;
	if (s->state == STREAM_OPENING)
		return -EAGAIN;
	if (s->err)
		return -stream_take_error(s);
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	if (s->write_draws_reset && total)
		return stream_end_write(s, total);
	if (s->wr_shut || s->reset || s->state != STREAM_OPEN)
		return -EPIPE;
	if (total == 0)
		return 0;
	size_t done = 0;
	if (s->held) {
		size_t space = stream_tx_space(s);
		done = stream_send_in_answer(rpc, s, iov, iovcnt, total < space ? total : space,
					     urgent);
	}
	while (done < total) {
		size_t chunk = stream_tx_space(s);
		if (chunk == 0)
			break;
		if (chunk > total - done)
			chunk = total - done;
		if (chunk > STREAM_DATA_MAX)
			chunk = stream_data_max(rpc, s);
		bool last = done + chunk == total || chunk == stream_tx_space(s);
		struct stream_tx *tx =
			stream_tx_new(rpc, s, (uint32_t)(sizeof(struct wire_seg) + chunk));
		if (!tx) {
			if (done == 0 && s->inflight == 0)
				return -ENOBUFS;
			break; /* memory comes back as requests complete */
		}
		struct wire_seg *w = (void *)tx->m->buf;
		*w = (struct wire_seg){.sid = s->peer_sid, .flags = urgent && last ? SEG_URG : 0,
				       .value = s->tx_seq};
		stream_tell(s, &w->consumed, &w->received);
		iov_copy_from(tx->m->buf + sizeof(*w), iov, iovcnt, done, chunk);
		tx->len = (uint32_t)chunk;
		if (stream_tx_send(rpc, tx, STREAM_REQ_DATA, data_cont)) {
			stream_fail(s, ECONNRESET);
			if (done)
				break;
			return -stream_take_error(s);
		}
		stream_defer_tx();
		stream_timed_sent(s);
		s->tx_seq += chunk;
		done += chunk;
	}
	if (done == 0)
		return -EAGAIN;
	/* Turned not writable: the file's readiness says so. */
	if (s->file && !stream_tx_writable(s))
		stream_ready(s->file, stream_mask(s), 0);
	return (ssize_t)done;
}

/* --- receiving --- */

ssize_t stream_recv(struct rpc *rpc, struct stream *s, const struct iovec *iov, int iovcnt,
		    int flags)
{
	if (s->state == STREAM_OPENING)
		return -EAGAIN;
	bool peek = flags & MSG_PEEK;
	uint8_t urg = s->urg;
	uint64_t head = s->rx.head;
	size_t skip, max;
	stream_urgent_bounds(s, &skip, &max);
	size_t n;
	if (flags & MSG_TRUNC) {
		size_t avail = rxbuf_avail(&s->rx) > skip ? rxbuf_avail(&s->rx) - skip : 0;
		n = 0;
		for (int i = 0; i < iovcnt; i++)
			n += iov[i].iov_len;
		n = n < avail ? n : avail;
		n = n < max ? n : max;
		if (!peek)
			rxbuf_skip(&s->rx, skip + n);
	} else {
		n = rxbuf_read_at(&s->rx, skip, max, iov, iovcnt, peek);
	}
	if (!peek) {
		stream_urgent_passed(s);
		/* Unreadable now: drained, below SO_RCVLOWAT, or stopped at an
		 * urgent byte out of line. */
		if (s->file && (s->rx.head != head || s->urg != urg)) {
			uint32_t m = stream_mask(s);
			if (!(m & EPOLLIN) || s->urg != urg)
				stream_ready(s->file, m, 0);
		}
	}
	if (n > 0) {
		/* stream_send_ctl tells the peer rx.head (rx_advertised) */
		if (!peek && !s->reset && s->state == STREAM_OPEN &&
		    rxbuf_update_due(&s->rx, s->rx_advertised))
			stream_send_ctl(rpc, s, STREAM_REQ_WINDOW, s->rx.head, stream_ctl_cont);
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

unsigned stream_release_held(struct rpc *rpc)
{
	unsigned n = 0;
	struct stream **pp = &streams.held_head;
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
	stream_work_update();
	return n;
}

/* Sends a WINDOW for bytes that came in answers and that no request of
 * ours has acknowledged for STREAM_ACK_DELAY_NS (st_ack_delay_ns). */
static unsigned stream_pay_owed(struct rpc *rpc)
{
	unsigned n = 0;
	uint64_t now = 0;
	struct stream **pp = &streams.owed_head;
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
			if (stream_send_ctl(rpc, s, STREAM_REQ_WINDOW, s->rx.head, stream_ctl_cont) == 0)
				n++;
		}
		*pp = s->owed_next;
		s->on_owed = false;
		stream_put(s);
	}
	return n;
}

unsigned stream_run_once(struct rpc *rpc)
{
	unsigned n = streams.held_head ? stream_release_held(rpc) : 0;
	unsigned pkts = rpc_run_once(rpc);
	unsigned k = ack_npending;
	for (unsigned i = 0; i < k; i++) {
		struct stream *s = ack_pending[i].s;
		stream_respond_ack(rpc, ack_pending[i].req, ack_pending[i].status, s);
		if (s)
			stream_put(s);
	}
	ack_npending = 0;
	n += k;
	if (streams.owed_head)
		n += stream_pay_owed(rpc);
	stream_expire(rpc);
	if (n)
		stream_defer_tx();
	stream_work_update();
	return pkts;
}

/* Queues the answer for after the pass (see stream_run_once). */
static void answer_later(struct rpc *rpc, struct rpc_req *req, struct stream *s, int status)
{
	if (ack_npending == ACK_PENDING_MAX) {
		stream_respond_ack(rpc, req, status, s);
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
	__atomic_add_fetch(&streams.nheld, 1, __ATOMIC_RELAXED);
	if (!s->on_held) {
		s->on_held = true;
		s->refs++;
		s->held_next = streams.held_head;
		streams.held_head = s;
	}
	/* The application's next wait answers it (ferry_flush), or the
	 * progress thread once the application has been away for a tick;
	 * not "deferred", which would have that thread answer at once. */
	__atomic_store_n(&streams.work, 1, __ATOMIC_RELAXED);
}

const struct wire_seg *stream_request_seg(struct rpc *rpc, struct rpc_req *req)
{
	const struct msgbuf *m = rpc_req_msg(req);
	if (m->data_size >= sizeof(struct wire_seg))
		return (const void *)m->buf;
	stream_respond_ack(rpc, req, -EPROTO, NULL);
	return NULL;
}

int stream_place_data(struct rpc *rpc, int session, const uint8_t *head, uint32_t off,
		      const uint8_t *data, uint32_t len, void *ctx)
{
	(void)ctx;
	struct wire_seg w;
	memcpy(&w, head, sizeof(w));
	struct stream *s = stream_lookup(w.sid, session);
	if (!s || s->reset)
		return -ECONNRESET; /* the handler looks again and refuses */
	if (off < sizeof(w)) {
		data += sizeof(w) - off;
		len -= (uint32_t)(sizeof(w) - off);
		off = sizeof(w);
	}
	return stream_rx_put(rpc, s, w.value + (off - sizeof(w)), data, len);
}

void stream_handle_data(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	const struct msgbuf *m = rpc_req_msg(req);
	const struct wire_seg *w = stream_request_seg(rpc, req);
	if (!w)
		return;
	struct stream *s = stream_lookup(w->sid, rpc_req_session(req));
	if (!s || s->reset) {
		stream_respond_ack(rpc, req, -ECONNRESET, NULL);
		if (s) { /* closed here: the peer's stream ends on the refusal */
			s->ended = true;
			stream_unlinger(s);
		}
		return;
	}
	stream_heard(s, w->consumed, w->received);
	/* Stored by stream_place_data as the packets came, or here from the
	 * one packet: kept in place or copied into the ring, one copy either
	 * way before the reader's. */
	int rc;
	size_t len;
	if (rpc_req_placed(req, &rc)) {
		len = rpc_req_size(req) - sizeof(*w);
	} else {
		len = m->data_size - sizeof(*w);
		rc = stream_rx_put(rpc, s, w->value, m->buf + sizeof(*w), len);
	}
	if (rc) {
		log_warn("stream %u: DATA at %llu+%zu refused (%d): resetting", s->sid,
			 (unsigned long long)w->value, len, rc);
		stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, stream_ctl_cont);
		stream_fail(s, ECONNRESET);
		stream_respond_ack(rpc, req, -ECONNRESET, NULL);
		return;
	}
	if ((w->flags & SEG_URG) && len)
		stream_urgent_arrived(s, w->value + len - 1);
	stream_hold(rpc, req, s);
	stream_notify(s, EPOLLIN);
}

void stream_handle_ctl(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	const struct wire_seg *w = stream_request_seg(rpc, req);
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
