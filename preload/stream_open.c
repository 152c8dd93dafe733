/* Opening a stream: the client's OPEN, sent again elsewhere when a shared
 * listener's holder let go, and the server's answer to it. */
#include "autoconfig.h"

#include "preload/stream_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "preload/ferry.h"
#include "preload/localaddr.h"
#include "transport/stats.h"
#include "transport/udp_bind.h"

/* How many times a client follows a shared listener elsewhere. */
#define STREAM_REDIRECTS_MAX 4

/*
 * OPEN again at a fresh rendezvous, where another holder of the listener
 * answers: the listener's process let go of it (-ESTALE), or went away
 * before it answered (its session ended), so it never took the stream, as
 * a SYN nobody answered is sent again. The socket layer gets the session,
 * off this lock. False when s cannot go again.
 */
bool stream_open_again(struct stream *s)
{
	if (s->state != STREAM_OPENING || !s->file || s->redirect ||
	    s->redirects >= STREAM_REDIRECTS_MAX)
		return false;
	s->redirects++;
	s->redirect = true;
	s->refs++;
	s->redirect_next = streams.redirect_head;
	streams.redirect_head = s;
	stream_work_update();
	return true;
}

static void open_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	struct stream_tx *tx = tag;
	struct stream *s = tx->s;
	unsigned attempt = tx->attempt;
	rpc_free_msg(rpc, tx->m);
	stream_tx_free(tx);
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
			err = wire_errno(r->status);
		} else {
			s->peer_sid = r->server_sid;
			s->peer_window = r->window;
		}
	}
	/* The answer was lost and the session ended before our OPEN went again
	 * (the peer accepted, wrote, closed and left): its bytes or its FIN
	 * say it accepted, so the connect succeeded, as the kernel's does at
	 * the SYN-ACK, and the session's end tells the rest (EOF after a FIN). */
	bool taken = status < 0 && (s->rx.tail > 0 || s->rx_fin);
	if (taken) {
		s->state = STREAM_OPEN;
		s->established = true;
		stats_inc(ferry_stats()->streams_connected);
		stream_notify(s, EPOLLOUT);
	} else if ((err == ESTALE || status < 0) && stream_open_again(s)) {
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
		    stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, stream_ctl_cont) == 0)
			s->ended = true;
		stream_notify(s, EPOLLOUT);
	}
	stream_unlinger(s);
	stream_put(s);
}

/* Queues s's OPEN on its session; holds a reference for the answer. */
static int stream_send_open(struct rpc *rpc, struct stream *s)
{
	struct stream_tx *tx = stream_tx_new(rpc, s, sizeof(struct wire_open));
	if (!tx)
		return -ENOMEM;
	struct wire_open *w = (void *)tx->m->buf;
	w->client_sid = s->sid;
	w->window = s->rx.cap;
	wire_addr_from(&w->dst, (const struct sockaddr *)&s->peer);
	wire_addr_from(&w->src, (const struct sockaddr *)&s->local);
	tx->attempt = s->redirects;
	int rc = stream_tx_send(rpc, tx, STREAM_REQ_OPEN, open_cont);
	if (rc)
		return rc;
	/* Sent at the application's next wait (a blocking connect's is right
	 * away), with whatever else it queued meanwhile. */
	stream_defer_tx();
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
	struct stream *s = streams.redirect_head;
	if (s) {
		streams.redirect_head = s->redirect_next;
		s->redirect_next = NULL;
		stream_work_update();
	}
	return s;
}

bool stream_redirect_pending(void)
{
	return __atomic_load_n(&streams.redirect_head, __ATOMIC_RELAXED) != NULL;
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

/*
 * Whether the peer could have reached w->dst with kernel TCP, and the
 * address the application sees it with (*peer). A peer is where its
 * session's handshake came from (its origin), with the port it claims:
 * what it says of its own address counts only when both are this host's
 * (a client bound to another of our addresses). Loopback is reached only
 * from this host, as the kernel drops 127.0.0.1 arriving from a wire, and
 * nobody reaches an address that is not ours. False: refuse, as a port
 * nobody listens on.
 */
static bool open_reach(struct rpc *rpc, int session, const struct wire_open *w,
		       struct wire_addr *peer)
{
	struct sockaddr_storage origin, dst, src;
	if (!rpc_session_origin(rpc, session, &origin))
		return false;
	wire_addr_to(&w->dst, AF_INET6, &dst); /* v4 as mapped: both families */
	wire_addr_to(&w->src, AF_INET6, &src);
	bool origin_here = localaddr_is_local((struct sockaddr *)&origin);
	if (udp_addr_is_loopback((struct sockaddr *)&dst) ? !origin_here
							  : !localaddr_is_local((struct sockaddr *)&dst))
		return false;
	*peer = w->src;
	if (!origin_here || !localaddr_is_local((struct sockaddr *)&src)) {
		wire_addr_from(peer, (struct sockaddr *)&origin);
		peer->port = w->src.port;
	}
	return true;
}

void stream_handle_open(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	const struct msgbuf *m = rpc_req_msg(req);
	struct wire_open_resp r = {.status = -ECONNREFUSED};
	if (m->data_size < sizeof(struct wire_open)) {
		r.status = -EPROTO;
		respond(rpc, req, &r, sizeof(r));
		return;
	}
	const struct wire_open *w = (const void *)m->buf;
	struct wire_addr peer;
	if (!open_reach(rpc, rpc_req_session(req), w, &peer)) {
		stats_inc(ferry_stats()->opens_unreachable);
		respond(rpc, req, &r, sizeof(r)); /* refused, as by a closed port */
		return;
	}
	struct listener *l = listener_match(&w->dst);
	if (!l && listener_gone(&w->dst))
		r.status = -ESTALE; /* it was shared: another holder answers */
	struct stream *s = l && listener_has_room(l) ? stream_alloc(rpc, rpc_req_session(req)) : NULL;
	if (s) {
		s->peer_sid = w->client_sid;
		s->peer_window = w->window;
		s->state = STREAM_OPEN;
		s->local_len = wire_addr_to(&w->dst, l->addr.ss_family, &s->local);
		s->peer_len = wire_addr_to(&peer, l->addr.ss_family, &s->peer);
		stats_inc(ferry_stats()->streams_accepted);
		r.status = 0;
		r.server_sid = s->sid;
		r.window = s->rx.cap;
		listener_enqueue(l, s);
	}
	respond(rpc, req, &r, sizeof(r));
}
