/* Requester side: our requests on a session, go-back-N, pacing decisions. */
#include "autoconfig.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport/clock.h"
#include "transport/copy.h"
#include "transport/log.h"
#include "transport/rpc_internal.h"

static bool paced(const struct rpc *rpc, const struct session *s)
{
	return rpc->cc && !timely_uncongested(&s->timely);
}

/* Sends what the slot may send now: request packets, then RFRs once the
 * response's size is known, while the session has credits. */
static void client_push(struct rpc *rpc, struct session *s, struct client_slot *cs)
{
	uint32_t target = cs->resp_pkts == 0 ? cs->req_pkts : cs->req_pkts + cs->resp_pkts - 1;
	if (cs->probing && target > cs->num_rx + 1)
		target = cs->num_rx + 1;
	while (cs->num_tx < target && s->credits > 0) {
		uint32_t idx = cs->num_tx++;
		s->credits--;
		if (paced(rpc, s)) {
			uint32_t bytes = PKTHDR_SIZE;
			if (idx < cs->req_pkts)
				bytes += pkt_data_len(cs->req->data_size, s->dpp, idx);
			uint64_t t = s->next_tx_ns > rpc->now_ns ? s->next_tx_ns : rpc->now_ns;
			s->next_tx_ns = t + (uint64_t)((double)bytes * 1e9 / timely_rate(&s->timely));
			struct wheel_pkt wp = {.session = s->num, .slot = (uint16_t)(cs - s->cslots),
					       .pkt_index = idx, .req_num = cs->req_num,
					       .epoch = cs->epoch, .bytes = bytes};
			if (wheel_insert(rpc->wheel, t, &wp) == 0) {
				stats_inc(rpc->st->pkts_paced);
				continue;
			}
		}
		tx_client_packet(rpc, s, cs, idx);
	}
}

/* The lowest busy slot above the one at i (-1: from the first), or -1. */
static int next_busy(const struct session *s, int i)
{
	uint64_t m = i < 0 ? s->busy_mask : i >= 63 ? 0 : s->busy_mask & (~0ull << (i + 1));
	return m ? __builtin_ctzll(m) : -1;
}

void client_push_all(struct rpc *rpc, struct session *s)
{
	for (int i = next_busy(s, -1); i >= 0 && s->credits > 0; i = next_busy(s, i))
		client_push(rpc, s, &s->cslots[i]);
}

static void client_start(struct rpc *rpc, struct session *s, struct client_slot *cs,
			 uint8_t req_type, struct msgbuf *req, rpc_cont_fn cont, void *tag)
{
	cs->busy = true;
	s->busy_mask |= 1ull << (cs - s->cslots);
	cs->rolled_back = false;
	cs->probing = false;
	cs->timeouts = 0;
	cs->flush_needed = false;
	cs->req_type = req_type;
	cs->req = req;
	cs->cont = cont;
	cs->tag = tag;
	cs->req_pkts = pkt_count(req->data_size, s->dpp);
	cs->resp_pkts = 0;
	cs->resp_size = 0;
	cs->resp = NULL;
	cs->num_tx = cs->num_rx = cs->high_tx = cs->rtt_from = 0;
	cs->progress_ns = rpc->now_ns;
	cs->epoch++;
	struct pkt_info pi = {.type = PKT_REQ, .req_type = req_type, .dest_session = s->peer_num,
			      .msg_size = req->data_size, .req_num = cs->req_num, .token = s->token};
	for (uint32_t k = 0; k < cs->req_pkts; k++) {
		pi.pkt_num = (uint16_t)k;
		pkthdr_encode(msgbuf_pkthdr(req, k), &pi);
	}
	s->busy_slots++;
	session_activate(rpc, s);
	stats_inc(rpc->st->requests_tx);
	client_push(rpc, s, cs);
}

static struct client_slot *free_slot(struct session *s)
{
	uint64_t all = s->n_client_slots >= 64 ? ~0ull : (1ull << s->n_client_slots) - 1;
	uint64_t free = ~s->busy_mask & all;
	return free ? &s->cslots[__builtin_ctzll(free)] : NULL;
}

void client_pump_backlog(struct rpc *rpc, struct session *s)
{
	struct client_slot *cs;
	while (s->state == SESSION_UP && s->backlog_len > 0 && (cs = free_slot(s))) {
		struct backlog_entry e = s->backlog[s->backlog_head];
		s->backlog_head = (s->backlog_head + 1) % s->backlog_cap;
		s->backlog_len--;
		client_start(rpc, s, cs, e.req_type, e.req, e.cont, e.tag);
	}
	if (s->busy_slots == 0 && s->backlog_len == 0)
		session_deactivate(rpc, s);
}

static int backlog_push(struct session *s, const struct backlog_entry *e)
{
	if (s->backlog_len == s->backlog_cap) {
		uint32_t cap = s->backlog_cap ? s->backlog_cap * 2 : 16;
		struct backlog_entry *b = malloc(cap * sizeof(*b));
		if (!b)
			return -ENOMEM;
		for (uint32_t i = 0; i < s->backlog_len; i++)
			b[i] = s->backlog[(s->backlog_head + i) % s->backlog_cap];
		free(s->backlog);
		s->backlog = b;
		s->backlog_cap = cap;
		s->backlog_head = 0;
	}
	s->backlog[(s->backlog_head + s->backlog_len) % s->backlog_cap] = *e;
	s->backlog_len++;
	return 0;
}

int rpc_enqueue_request(struct rpc *rpc, int session, uint8_t req_type, struct msgbuf *req,
			rpc_cont_fn cont, void *tag)
{
	struct session *s = session_get(rpc, session);
	if (!s || s->state != SESSION_UP)
		return -ENOTCONN;
	rpc->now_ns = clock_now_ns(); /* called outside the event loop too */
	if (req->data_size > req->max_data_size || req->data_size > RPC_MAX_MSG_SIZE)
		return -EMSGSIZE;
	struct client_slot *cs = s->backlog_len == 0 ? free_slot(s) : NULL;
	if (cs) {
		client_start(rpc, s, cs, req_type, req, cont, tag);
		return 0;
	}
	struct backlog_entry e = {.req_type = req_type, .req = req, .cont = cont, .tag = tag};
	int rc = backlog_push(s, &e);
	if (rc == 0)
		session_activate(rpc, s);
	return rc;
}

/* Go-back-N: forget everything sent after the last in-order answer and send
 * it again. An answer still on its way for a forgotten packet is taken if it
 * comes in order (it proves the packet arrived) and dropped otherwise. */
static void client_go_back(struct rpc *rpc, struct session *s, struct client_slot *cs)
{
	s->credits += cs->num_tx - cs->num_rx;
	cs->num_tx = cs->num_rx;
	cs->rtt_from = cs->high_tx;
	cs->epoch++;
	/* The forgotten packets' share of the pacing schedule is given back:
	 * their wheel entries are void now. */
	s->next_tx_ns = rpc->now_ns;
	cs->rolled_back = true;
	cs->flush_needed = true;
	cs->progress_ns = rpc->now_ns;
}

static void client_complete(struct rpc *rpc, struct session *s, struct client_slot *cs, int status,
			    const struct msgbuf *resp)
{
	/* The caller gets req back: nothing may still be reading it. */
	if (rpc->n_tx && cs->tx_batch == rpc->tx_batch)
		tx_flush(rpc);
	if (cs->flush_needed)
		nic_flush(rpc->nic);
	rpc_cont_fn cont = cs->cont;
	void *tag = cs->tag;
	struct msgbuf *reassembled = cs->resp;
	cs->busy = false;
	s->busy_mask &= ~(1ull << (cs - s->cslots));
	cs->resp = NULL;
	cs->req = NULL;
	cs->req_num += s->n_client_slots;
	cs->epoch++;
	s->busy_slots--;
	cont(rpc, status, resp, tag);
	if (reassembled)
		rpc_free_msg(rpc, reassembled);
}

/* Packet num_rx was answered by a later packet's cumulative answer. */
static void ack_implied(struct session *s, struct client_slot *cs)
{
	uint32_t idx = cs->num_rx++;
	if (idx < cs->num_tx)
		s->credits++;
	else
		cs->num_tx = idx + 1;
}

static void on_progress(struct rpc *rpc, struct session *s, struct client_slot *cs, uint32_t idx)
{
	cs->num_rx++;
	if (idx < cs->num_tx)
		s->credits++;
	else
		cs->num_tx = idx + 1; /* a late answer to a packet we had written off */
	cs->progress_ns = rpc->now_ns;
	cs->rolled_back = false;
	cs->probing = false;
	cs->timeouts = 0;
	if (idx >= cs->rtt_from) {
		uint64_t sent = cs->tx_ns[idx % s->credits_max];
		if (rpc->now_ns > sent) {
			s->rtt_ns = rpc->now_ns - sent;
			if (rpc->cc)
				timely_update(&s->timely, (double)s->rtt_ns / 1000.0, rpc->now_ns);
		}
	}
}

void client_on_answer(struct rpc *rpc, struct session *s, const struct pkt_info *pi,
		      const uint8_t *data)
{
	struct client_slot *cs = &s->cslots[pi->req_num % s->n_client_slots];
	if (!cs->busy || cs->req_num != pi->req_num) {
		session_drop(rpc, s, number);
		return;
	}
	if (pi->type == PKT_CR && (pi->flags & PKT_FLAG_NACK)) {
		/* It names the packet the responder expects next: the ones
		 * before it arrived, though their credit return may still be
		 * on its way (it leaves at the end of the responder's pass). */
		if (pi->pkt_num < cs->req_pkts && pi->pkt_num <= cs->high_tx)
			while (cs->num_rx < pi->pkt_num)
				ack_implied(s, cs);
		if (!cs->rolled_back && cs->num_tx > cs->num_rx)
			client_go_back(rpc, s, cs);
		/* Also when it comes late, after a timeout went back: what it
		 * answers may be all that was out, and nothing else would send
		 * the packet it asks for. */
		client_push(rpc, s, cs);
		return;
	}
	uint32_t idx;
	if (pi->type == PKT_CR) {
		if (pi->pkt_num + 1u >= cs->req_pkts || pi->msg_size != cs->req->data_size) {
			session_drop(rpc, s, number);
			return;
		}
		idx = pi->pkt_num;
	} else {
		if (pi->pkt_num > 0 && (cs->resp_pkts == 0 || pi->msg_size != cs->resp_size)) {
			session_drop(rpc, s, number);
			return;
		}
		idx = cs->req_pkts - 1 + pi->pkt_num;
	}
	/* A credit return, and a response's first packet, answer every
	 * request packet up to theirs (the responder sends one per pass). */
	if ((pi->type == PKT_CR || pi->pkt_num == 0) && idx < cs->high_tx)
		while (cs->num_rx < idx)
			ack_implied(s, cs);
	if (idx != cs->num_rx || idx >= cs->high_tx) {
		log_debug("session %u: answer %u out of order (rx %u tx %u, %s %u)", s->num, idx,
			  cs->num_rx, cs->num_tx, pi->type == PKT_CR ? "credit return" : "response",
			  pi->pkt_num);
		/* A gap means packets in between were lost (or reordered, which
		 * go-back-N treats alike): go back now rather than wait out the
		 * timeout. Duplicates and late answers are just dropped. */
		if (idx > cs->num_rx && idx < cs->num_tx && !cs->rolled_back) {
			client_go_back(rpc, s, cs);
			client_push(rpc, s, cs);
		}
		session_drop(rpc, s, number);
		return;
	}
	if (pi->type == PKT_RESP) {
		if (pi->pkt_num == 0) {
			uint32_t m = pkt_count(pi->msg_size, s->dpp);
			if (m > 1) {
				cs->resp = rpc_alloc_msg(rpc, pi->msg_size);
				if (!cs->resp) {
					session_drop(rpc, s, nomem);
					return;
				}
			}
			cs->resp_size = pi->msg_size;
			cs->resp_pkts = m;
		}
		uint32_t len = pkt_data_len(pi->msg_size, s->dpp, pi->pkt_num);
		on_progress(rpc, s, cs, idx);
		if (cs->resp_pkts == 1) {
			struct msgbuf view;
			client_complete(rpc, s, cs, 0, rpc_view_msg(&view, data, len));
			client_pump_backlog(rpc, s);
			client_push_all(rpc, s); /* slots that waited for credits */
			return;
		}
		copy_bytes(cs->resp->buf + (size_t)pi->pkt_num * s->dpp, data, len);
		if (cs->num_rx == cs->req_pkts + cs->resp_pkts - 1) {
			client_complete(rpc, s, cs, 0, cs->resp);
			client_pump_backlog(rpc, s);
			client_push_all(rpc, s);
			return;
		}
	} else {
		on_progress(rpc, s, cs, idx);
	}
	client_push_all(rpc, s);
}

void client_check_timeouts(struct rpc *rpc)
{
	uint64_t rto = (uint64_t)rpc->cfg->rto_us * 1000u;
	for (struct session *s = rpc->active; s; s = s->active_next) {
		for (int i = next_busy(s, -1); i >= 0; i = next_busy(s, i)) {
			struct client_slot *cs = &s->cslots[i];
			/* Back off while nothing comes back: a peer that is only
			 * descheduled should not be flooded with copies. */
			uint64_t wait = rto << (cs->timeouts < 6 ? cs->timeouts : 6);
			if (cs->busy && cs->num_tx > cs->num_rx && rpc->now_ns - cs->progress_ns >= wait) {
				log_debug("session %u slot %u: timeout after %llu us, going back from %u to %u (request %u packets, response %u)",
					  s->num, i, (unsigned long long)((rpc->now_ns - cs->progress_ns) / 1000),
					  cs->num_tx, cs->num_rx, cs->req_pkts, cs->resp_pkts);
				client_go_back(rpc, s, cs);
				nic_peer_unanswered(rpc->nic, s->peer);
				/* Most timeouts here are a late peer, not a loss: one
				 * packet finds out which, and its answer reopens the
				 * window (a real loss costs one round trip more). */
				cs->probing = true;
				if (cs->timeouts < UINT8_MAX)
					cs->timeouts++;
				client_push(rpc, s, cs);
			}
		}
	}
}

void client_fail_all(struct rpc *rpc, struct session *s, int err)
{
	for (int i = next_busy(s, -1); i >= 0; i = next_busy(s, i))
		client_complete(rpc, s, &s->cslots[i], err, NULL);
	while (s->backlog_len > 0) {
		struct backlog_entry e = s->backlog[s->backlog_head];
		s->backlog_head = (s->backlog_head + 1) % s->backlog_cap;
		s->backlog_len--;
		e.cont(rpc, err, NULL, e.tag);
	}
}
