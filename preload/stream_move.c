/* Moving a stream to another process (stream.h): the owner's MOVE, the
 * new owner's ATTACH, and the state handed between them. */
#include "autoconfig.h"

#include "preload/stream_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "transport/clock.h"
#include "transport/log.h"

/* A peer's stream told to move waits this long for its new owner: one
 * that never comes (it died on the way) must not hang our writers. */
#define STREAM_MOVE_TIMEOUT_NS (5000ull * 1000000ull)

static void (*move_heard)(void);

void stream_set_move_heard(void (*fn)(void))
{
	move_heard = fn;
}

static void move_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct stream *s = ((struct stream_tx *)tag)->s;
	const struct wire_ack *a = stream_ack_of(status, resp);
	if (a && a->status == 0) {
		s->move_acked = true;
		s->move_peer_tx = a->seq;
	} else if (a && a->status == -EAGAIN) {
		s->move_retry = true;
	} else {
		s->move_refused = true;
	}
	stream_ctl_cont(rpc, status, resp, tag);
	if (move_heard)
		move_heard();
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
		streams.tx_pending = true;
	return rc;
}

static bool ended_clean(const struct stream *s)
{
	return s->state == STREAM_FAILED && s->end_clean;
}

bool stream_can_follow(const struct stream *s)
{
	return (s->state == STREAM_OPEN && !s->reset) || ended_clean(s);
}

bool stream_peer_done(const struct stream *s)
{
	return ended_clean(s) ||
	       (s->move_refused && s->state == STREAM_OPEN && !s->reset && stream_fin_in(s));
}

void stream_release_done(struct rpc *rpc, struct stream *s)
{
	s->moving = false;
	if (s->state == STREAM_OPEN && !s->reset && !s->fin_sent && stream_send_fin(rpc, s) == 0) {
		s->fin_sent = true;
		streams.tx_pending = true; /* out at the unlock */
	}
}

size_t stream_snapshot_done(const struct stream *s, struct stream_snap *snap, void *buf,
			    size_t cap)
{
	size_t len = stream_snapshot(s, snap, buf, cap);
	snap->peer_done = 1;
	if (!stream_fin_in(s)) {
		snap->rx_fin = 1;
		snap->fin_seq = snap->rx_tail;
	}
	return len;
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
	snap->urg = s->urg;
	snap->urg_byte = s->urg_byte;
	snap->urg_seq = s->urg_seq;
	snap->local = s->local;
	snap->local_len = s->local_len;
	snap->peer = s->peer;
	snap->peer_len = s->peer_len;
	struct iovec v = {.iov_base = buf, .iov_len = cap};
	return rxbuf_read((struct rxbuf *)&s->rx, &v, 1, true);
}

static void attach_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct stream *s = ((struct stream_tx *)tag)->s;
	const struct wire_ack *a = stream_ack_of(status, resp);
	s->attaching = false;
	if (!a || a->status != 0) {
		log_debug("stream %u: the peer refused ATTACH (%d/%d)", s->sid, status,
			  a ? a->status : 0);
		/* After its FIN, a peer that closed meanwhile: what it sent
		 * reads to EOF, and the first write draws the reset. */
		stream_end(s, -ECONNRESET);
	}
	stream_ctl_cont(rpc, status, resp, tag);
	stream_notify(s, EPOLLOUT);
}

/* A stream on session (or none: -1) in the state snap gives, or NULL with
 * *rc set. */
static struct stream *restore_state(struct rpc *rpc, int session, const struct stream_snap *snap,
				    const void *bytes, size_t len, struct ffile *file, int *rc)
{
	*rc = -EPROTO;
	if (snap->magic != STREAM_SNAP_MAGIC || snap->rx_tail - snap->rx_head != len ||
	    len > STREAM_WINDOW || snap->local_len > sizeof(snap->local) ||
	    snap->peer_len > sizeof(snap->peer))
		return NULL;
	*rc = -ENOMEM;
	struct stream *s = stream_alloc(rpc, session);
	if (!s)
		return NULL;
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
		return NULL;
	}
	s->rx_advertised = snap->rx_advertised;
	s->rx_told = snap->rx_told;
	s->tx_seq = snap->tx_seq;
	s->tx_acked = snap->tx_acked;
	s->tx_delivered = snap->tx_delivered;
	if (snap->urg <= STREAM_URG_READ) {
		s->urg = snap->urg;
		s->urg_byte = snap->urg_byte;
		s->urg_seq = snap->urg_seq;
	}
	s->local = snap->local;
	s->local_len = snap->local_len;
	s->peer = snap->peer;
	s->peer_len = snap->peer_len;
	s->file = file;
	*rc = 0;
	return s;
}

int stream_restore(struct rpc *rpc, int session, const struct stream_snap *snap,
		   const void *bytes, size_t len, struct ffile *file, struct stream **out)
{
	int rc;
	struct stream *s = restore_state(rpc, session, snap, bytes, len, file, &rc);
	if (!s)
		return rc;
	struct stream_tx *tx = stream_tx_new(rpc, s, sizeof(struct wire_attach));
	if (!tx) {
		stream_put(s);
		return -ENOMEM;
	}
	struct wire_attach *w = (void *)tx->m->buf;
	*w = (struct wire_attach){.seg = {.sid = snap->peer_sid, .value = snap->cookie},
				  .sid = s->sid,
				  .window = s->rx.cap};
	stream_tell(s, &w->seg.consumed, &w->seg.received);
	rc = stream_tx_send(rpc, tx, STREAM_REQ_ATTACH, attach_cont);
	if (rc) {
		stream_put(s);
		return rc;
	}
	s->attaching = true;
	streams.tx_pending = true;
	*out = s;
	return 0;
}

int stream_restore_done(struct rpc *rpc, const struct stream_snap *snap, const void *bytes,
			size_t len, struct ffile *file, struct stream **out)
{
	if (!snap->rx_fin)
		return -EPROTO;
	int rc;
	struct stream *s = restore_state(rpc, -1, snap, bytes, len, file, &rc);
	if (!s)
		return rc;
	/* As the peer's session ending after its FIN: reads say EOF once the
	 * bytes are read, the first write draws the reset (stream_end). */
	stream_end(s, -ECONNRESET);
	*out = s;
	return 0;
}

void stream_handle_move(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	const struct wire_seg *w = stream_request_seg(rpc, req);
	if (!w)
		return;
	struct stream *s = stream_lookup(w->sid, rpc_req_session(req));
	/* Our OPEN's answer is still on its way (lost, so a retransmission
	 * brings it): the owner accepted and forked already, and asks again. */
	if (s && !s->reset && s->state == STREAM_OPENING && w->value != 0) {
		stream_respond_ack(rpc, req, -EAGAIN, NULL);
		return;
	}
	if (!s || s->reset || s->state != STREAM_OPEN || w->value == 0) {
		stream_respond_ack(rpc, req, -ECONNRESET, NULL);
		return;
	}
	stream_heard(s, w->consumed, w->received);
	if (!s->moving)
		streams.nmoving++;
	s->moving = true;
	s->move_cookie = w->value;
	s->move_deadline = clock_now_ns() + STREAM_MOVE_TIMEOUT_NS;
	if (s->held)
		stream_answer_held(rpc, s, 0, NULL, 0, 0);
	/* The owner asks again once our requests in flight are answered, so
	 * that what it hands over is all we sent. */
	stream_respond_ack(rpc, req, s->inflight ? -EAGAIN : 0, s);
	stream_notify(s, 0);
}

void stream_handle_attach(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	const struct msgbuf *m = rpc_req_msg(req);
	if (m->data_size < sizeof(struct wire_attach)) {
		stream_respond_ack(rpc, req, -EPROTO, NULL);
		return;
	}
	const struct wire_attach *w = (const void *)m->buf;
	uint32_t idx = w->seg.sid & SID_INDEX_MASK;
	struct stream *s = idx < streams.used ? streams.slots[idx] : NULL;
	if (!s || s->sid != w->seg.sid || !s->moving || s->move_cookie != w->seg.value) {
		log_debug("stream %u: ATTACH refused (%s)", w->seg.sid,
			  !s || s->sid != w->seg.sid ? "no such stream" : "not moving");
		stream_respond_ack(rpc, req, -ECONNREFUSED, NULL);
		return;
	}
	int session = rpc_req_session(req);
	s->session = session;
	s->token = rpc_session_token(rpc, session);
	s->peer_sid = w->sid;
	s->peer_window = w->window;
	s->moving = false;
	streams.nmoving--;
	s->move_cookie = 0;
	stream_heard(s, w->seg.consumed, w->seg.received);
	stream_respond_ack(rpc, req, 0, s);
	if (s->move_reset)
		stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, stream_ctl_cont);
	else if (s->move_fin)
		stream_send_ctl(rpc, s, STREAM_REQ_FIN, s->tx_seq, stream_ctl_cont);
	s->move_fin = s->move_reset = false;
	stream_notify(s, EPOLLOUT);
}
