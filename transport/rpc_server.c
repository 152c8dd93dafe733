/* Responder side: the peer's requests, at-most-once execution, responses. */
#include "autoconfig.h"

#include <string.h>

#include "transport/copy.h"
#include "transport/log.h"
#include "transport/rpc_internal.h"

static void send_cr(struct rpc *rpc, struct session *s, const struct server_slot *ss, uint32_t k,
		    uint8_t flags)
{
	struct pkt_info cr = {.type = PKT_CR, .req_type = ss->req_type, .flags = flags,
			      .dest_session = s->peer_num, .pkt_num = (uint16_t)k,
			      .msg_size = ss->req_size, .req_num = ss->req_num, .token = s->token};
	tx_ctrl(rpc, s, &cr);
}

static void send_resp_pkt(struct rpc *rpc, struct session *s, struct server_slot *ss, uint32_t k)
{
	struct msgbuf *m = ss->resp;
	ss->tx_batch = rpc->tx_batch;
	tx_packet(rpc, s, msgbuf_pkthdr(m, k), m->lkey, m->buf + (size_t)k * s->dpp,
		  pkt_data_len(m->data_size, s->dpp, k), m->lkey);
}

static void run_handler(struct rpc *rpc, struct session *s, struct server_slot *ss,
			const struct msgbuf *msg)
{
	rpc_handler_fn fn = rpc->handlers[ss->req_type].fn;
	if (!fn) {
		ferry_log_once(FERRY_LOG_WARN, "request of type %u with no handler dropped",
			       ss->req_type);
		session_drop(rpc, s, type);
		ss->state = SRV_EMPTY;
		return;
	}
	ss->state = SRV_IN_HANDLER;
	ss->handle.session = s;
	ss->handle.slot = ss;
	ss->handle.msg = msg;
	session_hold(s); /* dropped by rpc_respond */
	stats_inc(rpc->st->requests_rx);
	fn(rpc, &ss->handle, rpc->handlers[ss->req_type].ctx);
	ss->handle.msg = NULL;
	if (ss->req) {
		rpc_free_msg(rpc, ss->req);
		ss->req = NULL;
	}
}

static void start_request(struct rpc *rpc, struct session *s, struct server_slot *ss,
			  const struct pkt_info *pi)
{
	session_release_server_slot(rpc, ss);
	ss->state = SRV_RECEIVING;
	ss->req_num = pi->req_num;
	ss->req_type = pi->req_type;
	ss->req_size = pi->msg_size;
	ss->req_pkts = pkt_count(pi->msg_size, s->dpp);
	ss->rx_pkts = 0;
	ss->placed = ss->req_pkts > 1 && rpc->handlers[ss->req_type].place &&
		     rpc->handlers[ss->req_type].head_len <= s->dpp;
	ss->place_status = 0;
	ss->nacked_at = UINT32_MAX;
	ss->resp_pkts = 0;
	ss->cr_due = false;
	ss->cr_owed = 0;
}

/*
 * A credit return is cumulative: one for packet k answers every packet of
 * the request up to k. The requester's window needs an answer for each
 * packet by the end of the pass that received it, not before, so a pass
 * that takes several packets of a request sends one credit return for
 * them, or one per quarter of the session's credits: a lost one then
 * holds back only that many, and the next one makes up for it.
 */
static void owe_cr(struct rpc *rpc, struct session *s, struct server_slot *ss)
{
	uint32_t every = s->credits_max / 4;
	if (every > RPC_CR_EVERY)
		every = RPC_CR_EVERY;
	if (++ss->cr_owed >= every || (!ss->cr_due && rpc->n_cr_due == RPC_RX_BATCH)) {
		ss->cr_owed = 0;
		send_cr(rpc, s, ss, ss->rx_pkts - 1, 0);
		return;
	}
	if (ss->cr_due)
		return;
	ss->cr_due = true;
	rpc->cr_due[rpc->n_cr_due].session = s->num;
	rpc->cr_due[rpc->n_cr_due].slot = (uint16_t)(ss - s->sslots);
	rpc->n_cr_due++;
}

void server_flush_crs(struct rpc *rpc)
{
	for (unsigned i = 0; i < rpc->n_cr_due; i++) {
		struct session *s = session_get(rpc, rpc->cr_due[i].session);
		if (!s)
			continue;
		struct server_slot *ss = &s->sslots[rpc->cr_due[i].slot];
		if (!ss->cr_due)
			continue;
		bool owed = ss->cr_owed > 0;
		ss->cr_due = false;
		ss->cr_owed = 0;
		if (!owed || s->state != SESSION_UP)
			continue;
		/* Its last packet came in the same pass: a response sent
		 * answers them all; one held by its handler does not yet. */
		if (ss->state == SRV_RECEIVING)
			send_cr(rpc, s, ss, ss->rx_pkts - 1, 0);
		else if (ss->state == SRV_IN_HANDLER)
			send_cr(rpc, s, ss, ss->req_pkts - 2, 0);
	}
	rpc->n_cr_due = 0;
}

/* A placed request: no reassembly buffer, so no copy and no allocation. */
static void place_in_order(struct rpc *rpc, struct session *s, struct server_slot *ss, uint32_t k,
			   const uint8_t *data, uint32_t len)
{
	uint32_t head_len = rpc->handlers[ss->req_type].head_len;
	if (k == 0)
		memcpy(ss->head, data, head_len);
	if (ss->place_status == 0)
		ss->place_status = rpc->handlers[ss->req_type].place(
			rpc, s->num, ss->head, k * s->dpp, data, len, rpc->handlers[ss->req_type].ctx);
	ss->rx_pkts++;
	if (ss->rx_pkts == ss->req_pkts) {
		struct msgbuf view;
		run_handler(rpc, s, ss, rpc_view_msg(&view, ss->head, head_len));
	} else {
		owe_cr(rpc, s, ss);
	}
}

static void receive_in_order(struct rpc *rpc, struct session *s, struct server_slot *ss,
			     const struct pkt_info *pi, const uint8_t *data)
{
	uint32_t k = pi->pkt_num;
	uint32_t len = pkt_data_len(ss->req_size, s->dpp, k);
	if (ss->req_pkts == 1) {
		struct msgbuf view;
		ss->rx_pkts = 1;
		run_handler(rpc, s, ss, rpc_view_msg(&view, data, len));
		return;
	}
	if (ss->placed) {
		place_in_order(rpc, s, ss, k, data, len);
		return;
	}
	if (k == 0) {
		ss->req = rpc_alloc_msg(rpc, ss->req_size);
		if (!ss->req) {
			/* The requester will send it again; maybe memory is back then. */
			session_drop(rpc, s, nomem);
			ss->state = SRV_EMPTY;
			return;
		}
	}
	copy_bytes(ss->req->buf + (size_t)k * s->dpp, data, len);
	ss->rx_pkts++;
	if (ss->rx_pkts == ss->req_pkts)
		run_handler(rpc, s, ss, ss->req);
	else
		owe_cr(rpc, s, ss);
}

void server_on_request(struct rpc *rpc, struct session *s, const struct pkt_info *pi,
		       const uint8_t *data)
{
	struct server_slot *ss = &s->sslots[pi->req_num % RPC_SERVER_SLOTS];
	if (ss->state == SRV_EMPTY || pi->req_num > ss->req_num) {
		if (ss->state == SRV_IN_HANDLER) {
			/* The requester reuses a slot only after the response: this
			 * cannot be a well-behaved peer. */
			session_drop(rpc, s, number);
			return;
		}
		if (pi->pkt_num != 0) {
			/* The first packet of a new request was lost. */
			struct server_slot probe = {.req_type = pi->req_type, .req_size = pi->msg_size,
						    .req_num = pi->req_num};
			send_cr(rpc, s, &probe, 0, PKT_FLAG_NACK);
			session_drop(rpc, s, number);
			return;
		}
		start_request(rpc, s, ss, pi);
	} else if (pi->req_num < ss->req_num) {
		session_drop(rpc, s, number); /* stale duplicate of a finished request */
		return;
	} else if (pi->msg_size != ss->req_size || pi->req_type != ss->req_type) {
		session_drop(rpc, s, size);
		return;
	}

	uint32_t k = pi->pkt_num;
	switch (ss->state) {
	case SRV_RECEIVING:
		if (k == ss->rx_pkts) {
			receive_in_order(rpc, s, ss, pi, data);
		} else if (k < ss->rx_pkts) {
			/* Our credit return was lost: the latest answers this one. */
			send_cr(rpc, s, ss, ss->rx_pkts - 1, 0);
		} else {
			if (ss->nacked_at != ss->rx_pkts) {
				ss->nacked_at = ss->rx_pkts;
				send_cr(rpc, s, ss, ss->rx_pkts, PKT_FLAG_NACK);
			}
			session_drop(rpc, s, number);
		}
		break;
	case SRV_IN_HANDLER:
		if (k + 1 < ss->req_pkts)
			send_cr(rpc, s, ss, k, 0);
		break;
	case SRV_RESPONDED:
		if (k + 1 < ss->req_pkts) {
			send_cr(rpc, s, ss, k, 0);
		} else {
			/* Executed already: answer from the saved response. */
			ss->resp_retransmitted = true;
			session_retransmit(rpc, s);
			send_resp_pkt(rpc, s, ss, 0);
		}
		break;
	case SRV_EMPTY:
		break;
	}
}

void server_on_rfr(struct rpc *rpc, struct session *s, const struct pkt_info *pi)
{
	struct server_slot *ss = &s->sslots[pi->req_num % RPC_SERVER_SLOTS];
	if (ss->state != SRV_RESPONDED || ss->req_num != pi->req_num || pi->pkt_num == 0 ||
	    pi->pkt_num >= ss->resp_pkts || pi->msg_size != ss->resp->data_size) {
		session_drop(rpc, s, number);
		return;
	}
	send_resp_pkt(rpc, s, ss, pi->pkt_num);
}

const struct msgbuf *rpc_req_msg(const struct rpc_req *req) { return req->msg; }
uint8_t rpc_req_type(const struct rpc_req *req) { return req->slot->req_type; }
int rpc_req_session(const struct rpc_req *req) { return req->session->num; }
uint32_t rpc_req_size(const struct rpc_req *req) { return req->slot->req_size; }

bool rpc_req_placed(const struct rpc_req *req, int *status)
{
	*status = req->slot->place_status;
	return req->slot->placed;
}

struct msgbuf *rpc_resp_msg(struct rpc *rpc, struct rpc_req *req, uint32_t size)
{
	struct server_slot *ss = req->slot;
	struct session *s = req->session;
	if (size > RPC_MAX_MSG_SIZE)
		return NULL;
	if (ss->resp && ss->resp != ss->pre_resp)
		rpc_free_msg(rpc, ss->resp);
	ss->resp = NULL;
	if (size <= s->dpp) {
		if (!ss->pre_resp)
			ss->pre_resp = rpc_alloc_msg(rpc, rpc->max_dpp);
		ss->resp = ss->pre_resp;
	} else {
		ss->resp = rpc_alloc_msg(rpc, size);
	}
	if (ss->resp)
		msgbuf_resize(ss->resp, size);
	return ss->resp;
}

void rpc_respond(struct rpc *rpc, struct rpc_req *req)
{
	struct server_slot *ss = req->slot;
	struct session *s = req->session;
	if (s->state == SESSION_DEAD) {
		session_release_server_slot(rpc, ss);
		ss->state = SRV_EMPTY;
		session_put(rpc, s);
		return;
	}
	if (!ss->resp && !rpc_resp_msg(rpc, req, 0)) {
		/* No memory even for an empty response: the requester retries
		 * and the request runs again once (at most once per arrival). */
		session_drop(rpc, s, nomem);
		ss->state = SRV_EMPTY;
		session_put(rpc, s);
		return;
	}
	struct msgbuf *m = ss->resp;
	ss->resp_pkts = pkt_count(m->data_size, s->dpp);
	struct pkt_info pi = {.type = PKT_RESP, .req_type = ss->req_type,
			      .dest_session = s->peer_num, .msg_size = m->data_size,
			      .req_num = ss->req_num, .token = s->token};
	for (uint32_t k = 0; k < ss->resp_pkts; k++) {
		pi.pkt_num = (uint16_t)k;
		pkthdr_encode(msgbuf_pkthdr(m, k), &pi);
	}
	ss->state = SRV_RESPONDED;
	ss->resp_retransmitted = false;
	send_resp_pkt(rpc, s, ss, 0);
	session_put(rpc, s);
}
