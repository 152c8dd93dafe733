/* Transmit side of an endpoint: packet batching, control packets, pacing. */
#include "autoconfig.h"

#include <string.h>

#include "transport/clock.h"
#include "transport/rpc_internal.h"

void tx_flush(struct rpc *rpc)
{
	unsigned n = rpc->n_tx, sent = 0;
	while (sent < n) {
		unsigned k = nic_tx_burst(rpc->nic, rpc->tx + sent, n - sent);
		if (k == 0)
			break;
		sent += k;
	}
	/* Packets the nic refused are lost like packets lost in the network:
	 * go-back-N sends them again. */
	if (sent < n)
		stats_add(&rpc->st->drop_nomem, n - sent);
	stats_add(&rpc->st->pkts_tx, sent);
	rpc->n_tx = 0;
	rpc->tx_batch++;
}

void tx_packet(struct rpc *rpc, struct session *s, const void *hdr, uint32_t hdr_lkey,
	       const void *data, uint32_t data_len, uint32_t data_lkey)
{
	struct nic_tx *t = &rpc->tx[rpc->n_tx++];
	t->peer = s->peer;
	t->sge[0].addr = hdr;
	t->sge[0].lkey = hdr_lkey;
	if (data_len == 0) {
		t->nsge = 1;
		t->sge[0].len = PKTHDR_SIZE;
	} else if ((const uint8_t *)hdr + PKTHDR_SIZE == (const uint8_t *)data) {
		/* Packet 0: the header sits right before the data, one piece. */
		t->nsge = 1;
		t->sge[0].len = PKTHDR_SIZE + data_len;
	} else {
		t->nsge = 2;
		t->sge[0].len = PKTHDR_SIZE;
		t->sge[1].addr = data;
		t->sge[1].len = data_len;
		t->sge[1].lkey = data_lkey;
	}
	stats_add(&rpc->st->bytes_tx, data_len);
	if (rpc->n_tx == RPC_TX_BATCH)
		tx_flush(rpc);
}

void tx_ctrl(struct rpc *rpc, struct session *s, const struct pkt_info *info)
{
	/* Header-only packets need registered memory that outlives the send:
	 * a ring far deeper than any send queue. */
	struct pkthdr *h = (struct pkthdr *)(void *)(rpc->ctrl_chunk->addr +
						     (size_t)rpc->ctrl_next * PKTHDR_SIZE);
	rpc->ctrl_next = (rpc->ctrl_next + 1) % RPC_CTRL_HDRS;
	pkthdr_encode(h, info);
	tx_packet(rpc, s, h, rpc->ctrl_chunk->lkey, NULL, 0, 0);
}

void tx_client_packet(struct rpc *rpc, struct session *s, struct client_slot *cs, uint32_t idx)
{
	cs->tx_ns[idx % s->credits_max] = rpc->now_ns;
	cs->tx_batch = rpc->tx_batch;
	if (idx < cs->high_tx)
		session_retransmit(rpc, s);
	else
		cs->high_tx = idx + 1;
	/* The retransmission timer runs from when the oldest unanswered packet
	 * really left, not from when pacing queued it. */
	if (idx == cs->num_rx)
		cs->progress_ns = rpc->now_ns;
	if (idx < cs->req_pkts) {
		struct msgbuf *m = cs->req;
		uint32_t len = pkt_data_len(m->data_size, s->dpp, idx);
		tx_packet(rpc, s, msgbuf_pkthdr(m, idx), m->lkey, m->buf + (size_t)idx * s->dpp, len,
			  m->lkey);
		return;
	}
	struct pkt_info rfr = {
		.type = PKT_RFR,
		.req_type = cs->req_type,
		.dest_session = s->peer_num,
		.pkt_num = (uint16_t)(idx - cs->req_pkts + 1),
		.msg_size = cs->resp_size,
		.req_num = cs->req_num,
		.token = s->token,
	};
	tx_ctrl(rpc, s, &rfr);
}

void tx_reap_wheel(struct rpc *rpc)
{
	struct wheel_pkt due[RPC_TX_BATCH];
	unsigned n;
	while ((n = wheel_reap(rpc->wheel, rpc->now_ns, due, RPC_TX_BATCH)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			struct session *s = session_get(rpc, due[i].session);
			if (!s || s->state != SESSION_UP)
				continue;
			struct client_slot *cs = &s->cslots[due[i].slot];
			/* A packet whose slot went back or moved on is not the one
			 * the slot wants now: its answer must not be taken for
			 * the retransmission's. */
			if (!cs->busy || cs->req_num != due[i].req_num || cs->epoch != due[i].epoch ||
			    due[i].pkt_index >= cs->num_tx)
				continue;
			tx_client_packet(rpc, s, cs, due[i].pkt_index);
		}
		if (n < RPC_TX_BATCH)
			break;
	}
}
