/*
 * nic_ib: the RDMA datapath over one UD queue pair, on whichever verbs
 * provider the caller passes (verbs_seam.h: libibverbs, or compat/softib).
 * The datapath calls (ibv_post_send, ibv_post_recv, ibv_poll_cq,
 * ibv_req_notify_cq) are libibverbs' inline dispatch through
 * ibv_context.ops, which every provider fills; everything else goes through
 * ib->api, and where providers differ the api's fields and optional hooks
 * say how, so nothing here asks which provider it holds.
 */
#include "autoconfig.h"

#include "transport/nic_ib_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "transport/config.h"
#include "transport/log.h"
#include "transport/stats.h"
#include "transport/sys.h"
#include "transport/verbs_seam.h"

static uint64_t ib_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- receive ring ---- */

static uint32_t ib_slot_of(const struct nic_ib *ib, const uint8_t *pkt)
{
	return (uint32_t)((size_t)(pkt - ib->rx_mem - IB_RX_HEADROOM) / ib->rx_stride);
}

uint8_t *ib_slot_pkt(const struct nic_ib *ib, uint32_t slot)
{
	return ib->rx_mem + (size_t)slot * ib->rx_stride + IB_RX_HEADROOM;
}

/* Posts pending receive buffers, newest first, as post lists of up to
 * IB_TX_CHUNK, until rq_target are posted. */
static void ib_post_pending(struct nic_ib *ib)
{
	struct ibv_recv_wr wrs[IB_TX_CHUNK];
	struct ibv_sge sges[IB_TX_CHUNK];
	while (ib->n_pending > 0 && ib->rq_posted < ib->rq_target) {
		unsigned n = ib->n_pending < IB_TX_CHUNK ? ib->n_pending : IB_TX_CHUNK;
		if (n > ib->rq_target - ib->rq_posted)
			n = ib->rq_target - ib->rq_posted;
		for (unsigned i = 0; i < n; i++) {
			uint8_t *pkt = ib->pending[ib->n_pending - 1 - i];
			/* The GRH lands in the 40 bytes before the packet header. */
			sges[i] = (struct ibv_sge){.addr = (uintptr_t)(pkt - IB_GRH_BYTES),
						   .length = IB_GRH_BYTES + ib->base.max_pkt_size,
						   .lkey = ib->rx_mr->lkey};
			wrs[i] = (struct ibv_recv_wr){.wr_id = (uintptr_t)pkt,
						      .next = i + 1 < n ? &wrs[i + 1] : NULL,
						      .sg_list = &sges[i],
						      .num_sge = 1};
		}
		struct ibv_recv_wr *bad = NULL;
		int rc = ibv_post_recv(ib->qp, wrs, &bad);
		unsigned posted = rc ? (unsigned)(bad - wrs) : n;
		for (unsigned i = 0; i < posted; i++)
			ib->rx_state[ib_slot_of(ib, (uint8_t *)(uintptr_t)wrs[i].wr_id)] =
				IB_BUF_POSTED;
		ib->n_pending -= posted;
		ib->rq_posted += posted;
		if (rc) {
			log_warn("nic_ib: ibv_post_recv failed: %s; %u receive buffers wait",
				 strerror(rc), ib->n_pending);
			return;
		}
	}
}

void ib_recycle(struct nic_ib *ib, uint8_t *pkt)
{
	uint32_t slot = ib_slot_of(ib, pkt);
	if (slot >= ib->rq_depth || ib_slot_pkt(ib, slot) != pkt ||
	    ib->rx_state[slot] == IB_BUF_PENDING) {
		log_error("nic_ib: post_recvs got %p, which is not a held receive buffer",
			  (void *)pkt);
		return;
	}
	ib->rx_state[slot] = IB_BUF_PENDING;
	ib->pending[ib->n_pending++] = pkt;
}

static void ib_post_recvs(struct nic *nic, void *const *bufs, unsigned n)
{
	struct nic_ib *ib = to_ib(nic);
	for (unsigned i = 0; i < n; i++)
		ib_recycle(ib, bufs[i]);
	uint32_t missing = ib->rq_posted < ib->rq_target ? ib->rq_target - ib->rq_posted : 0;
	if (missing >= IB_RECV_BATCH || ib->rq_posted < ib->rq_target / 4)
		ib_post_pending(ib);
}

static void ib_update_rq_target(struct nic_ib *ib)
{
	uint32_t fits = IB_RQ_BYTES / (ib->rx_avg_len > 64u ? ib->rx_avg_len : 64u);
	uint32_t want = fits > ib->rq_need ? fits : ib->rq_need;
	ib->rq_target = want < ib->rq_depth ? want : ib->rq_depth;
	/* Kept buffers come out of what the sessions' credits leave spare:
	 * the ring posted still covers every packet in flight. */
	uint32_t spare = ib->rq_depth - ib->rq_need;
	ib->base.rx_keep_max = spare / 2 < ib->rq_depth / 4 ? spare / 2 : ib->rq_depth / 4;
}

void ib_set_rq_need(struct nic_ib *ib)
{
	uint64_t need = IB_RQ_RESERVE + 2ull * ib->credits * ib->n_peers;
	ib->rq_need = need < ib->rq_depth ? (uint32_t)need : ib->rq_depth;
	ib_update_rq_target(ib);
	ib_post_pending(ib);
}

static void ib_qp_recover(struct nic_ib *ib);

/* Turns one receive completion into a packet, or recycles its buffer. */
static bool ib_rx_one(struct nic_ib *ib, const struct ibv_wc *wc, struct nic_rx *out)
{
	uint8_t *pkt = (uint8_t *)(uintptr_t)wc->wr_id;
	uint32_t slot = ib_slot_of(ib, pkt);
	if (slot >= ib->rq_depth || ib->rx_state[slot] != IB_BUF_POSTED) {
		log_error("nic_ib: receive completion for unknown buffer %p", (void *)pkt);
		return false;
	}
	ib->rq_posted--;
	ib->rx_state[slot] = IB_BUF_HELD;
	if (wc->status != IBV_WC_SUCCESS || wc->byte_len < IB_GRH_BYTES) {
		if (wc->status != IBV_WC_WR_FLUSH_ERR)
			log_warn("nic_ib: receive completion error: %s (len %u)",
				 verbs_wc_status_name(wc->status), wc->byte_len);
		ib_recycle(ib, pkt);
		if (wc->status != IBV_WC_SUCCESS)
			ib->broken = true;
		return false;
	}
	*out = (struct nic_rx){.pkt = pkt, .len = wc->byte_len - IB_GRH_BYTES, .buf = pkt};
	ib->rx_avg_len = ib->rx_avg_len - ib->rx_avg_len / 8u + out->len / 8u;
	return true;
}

static unsigned ib_rx_burst(struct nic *nic, struct nic_rx *out, unsigned max)
{
	struct nic_ib *ib = to_ib(nic);
	unsigned got = 0;
	while (got < max && ib->stash_i < ib->stash_n)
		got += ib_rx_one(ib, &ib->stash[ib->stash_i++], &out[got]);
	if (ib->stash_i == ib->stash_n)
		ib->stash_i = ib->stash_n = 0;
	while (got < max) {
		struct ibv_wc wc[IB_STASH];
		int want = (int)(max - got < IB_STASH ? max - got : IB_STASH);
		int n = ibv_poll_cq(ib->recv_cq, want, wc);
		if (n <= 0) {
			if (n < 0)
				log_warn("nic_ib: ibv_poll_cq(recv) failed");
			break;
		}
		for (int i = 0; i < n; i++)
			got += ib_rx_one(ib, &wc[i], &out[got]);
		if (n < want)
			break;
	}
	if (ib->broken)
		ib_qp_recover(ib);
	if (got)
		ib_update_rq_target(ib);
	if (ib->n_pending && ib->rq_posted < ib->rq_target &&
	    (got == 0 || ib->rq_posted < ib->rq_target / 4))
		ib_post_pending(ib);
	return got;
}

/* ---- send queue ---- */

/* Retires completed sends; returns completions seen or -1. */
static int ib_poll_send(struct nic_ib *ib)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(ib->send_cq, 16, wc);
	if (n < 0) {
		log_warn("nic_ib: ibv_poll_cq(send) failed");
		return -1;
	}
	for (int i = 0; i < n; i++) {
		/* Unsignalled WRs carry wr_id 0; one completes only on error. */
		uint32_t covered = wc[i].wr_id ? (uint32_t)wc[i].wr_id : 1;
		ib->sq_outstanding = covered > ib->sq_outstanding ? 0 : ib->sq_outstanding - covered;
		if (wc[i].status != IBV_WC_SUCCESS) {
			if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
				log_warn("nic_ib: send completion error: %s",
					 verbs_wc_status_name(wc[i].status));
			ib->broken = true;
		}
	}
	return n;
}

/* Waits until the send queue has room for n more WRs (the CQ is polled
 * before the queue can fill, as selective signalling requires). */
static bool ib_sq_reserve(struct nic_ib *ib, uint32_t n)
{
	uint64_t deadline = 0;
	while (ib->sq_outstanding + n > ib->sq_depth) {
		int got = ib_poll_send(ib);
		if (got < 0)
			return false;
		if (got == 0) {
			uint64_t now = ib_now_ns();
			if (!deadline)
				deadline = now + IB_FLUSH_TIMEOUT_NS;
			else if (now > deadline) {
				log_error("nic_ib: send queue stuck (%u WRs outstanding)",
					  ib->sq_outstanding);
				return false;
			}
		}
	}
	return true;
}

static unsigned ib_tx_burst(struct nic *nic, const struct nic_tx *pkts, unsigned n)
{
	struct nic_ib *ib = to_ib(nic);
	unsigned done = 0;
	/* One look at the send CQ per burst keeps the queue short and notices
	 * an error before more packets follow into a stopped queue. */
	if (ib->sq_outstanding)
		ib_poll_send(ib);
	if (ib->broken)
		ib_qp_recover(ib);
	while (done < n) {
		unsigned chunk = n - done < IB_TX_CHUNK ? n - done : IB_TX_CHUNK;
		if (!ib_sq_reserve(ib, chunk))
			break;
		struct ibv_send_wr wrs[IB_TX_CHUNK];
		struct ibv_sge sges[IB_TX_CHUNK][2];
		unsigned pkt_of[IB_TX_CHUNK]; /* packet index of each WR */
		unsigned k = 0;
		for (unsigned i = 0; i < chunk; i++) {
			const struct nic_tx *t = &pkts[done + i];
			uint32_t len = 0;
			for (unsigned s = 0; s < t->nsge && s < 2; s++) {
				sges[k][s] = (struct ibv_sge){.addr = (uintptr_t)t->sge[s].addr,
							      .length = t->sge[s].len,
							      .lkey = t->sge[s].lkey};
				len += t->sge[s].len;
			}
			if (len > nic->max_pkt_size || t->nsge < 1 || t->nsge > 2 || !t->peer) {
				/* Accepted and lost, as the contract allows. */
				if (nic->stats)
					stats_drop(nic->stats, size);
				continue;
			}
			wrs[k] = (struct ibv_send_wr){
				.sg_list = sges[k],
				.num_sge = t->nsge,
				.opcode = IBV_WR_SEND,
				.send_flags = len <= ib->max_inline ? IBV_SEND_INLINE : 0,
				.wr.ud = {.ah = t->peer->ahe->ah,
					  .remote_qpn = t->peer->qpn,
					  .remote_qkey = t->peer->qkey},
			};
			if (k > 0)
				wrs[k - 1].next = &wrs[k];
			pkt_of[k++] = done + i;
		}
		if (k > 0) {
			/* One signalled WR per post list retires the whole list. */
			wrs[k - 1].send_flags |= IBV_SEND_SIGNALED;
			wrs[k - 1].wr_id = ib->unsignalled + k;
			struct ibv_send_wr *bad = NULL;
			int rc = ibv_post_send(ib->qp, wrs, &bad);
			if (rc) {
				unsigned posted = bad ? (unsigned)(bad - wrs) : 0;
				if (posted > k)
					posted = 0;
				/* The signalled WR did not go: the posted ones wait for
				 * the next signalled WR, or for flush's fence. */
				ib->sq_outstanding += posted;
				ib->unsignalled += posted;
				log_warn("nic_ib: ibv_post_send failed: %s", strerror(rc));
				return pkt_of[posted];
			}
			ib->sq_outstanding += k;
			ib->unsignalled = 0;
		}
		done += chunk;
	}
	return done;
}

/* Posts a signalled zero-byte send to our own QP with a wrong QKey (the
 * receiver drops it), so every earlier unsignalled WR gets retired. */
static bool ib_post_fence(struct nic_ib *ib)
{
	if (!ib_sq_reserve(ib, 1))
		return false;
	struct ibv_sge sge = {.addr = (uintptr_t)ib->rx_mem, .length = 0, .lkey = ib->rx_mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = ib->unsignalled + 1,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
		.wr.ud = {.ah = ib->self_ah, .remote_qpn = ib->qp->qp_num,
			  .remote_qkey = IB_QKEY ^ 1u},
	}, *bad = NULL;
	int rc = ibv_post_send(ib->qp, &wr, &bad);
	if (rc) {
		log_warn("nic_ib: flush could not post its fence: %s", strerror(rc));
		return false;
	}
	ib->sq_outstanding++;
	ib->unsignalled = 0;
	return true;
}

void ib_flush(struct nic *nic)
{
	struct nic_ib *ib = to_ib(nic);
	if (ib->unsignalled && !ib_post_fence(ib)) {
		ib->unsignalled = 0;
		ib->sq_outstanding = 0;
		return;
	}
	uint64_t deadline = 0;
	while (ib->sq_outstanding > 0) {
		int got = ib_poll_send(ib);
		if (got < 0)
			break;
		if (got == 0) {
			uint64_t now = ib_now_ns();
			if (!deadline) {
				deadline = now + IB_FLUSH_TIMEOUT_NS;
			} else if (now > deadline) {
				log_error("nic_ib: flush gave up with %u sends outstanding",
					  ib->sq_outstanding);
				break;
			}
		}
	}
	ib->sq_outstanding = 0;
}

/*
 * A send or receive error moved the QP out of RTS. SQE only needs the way
 * back to RTS; ERR needs the full RESET/INIT/RTR/RTS walk, and the receive
 * buffers the reset discarded go back to the ring.
 */
int ib_qp_to_rts(struct nic_ib *ib, bool from_reset)
{
	struct ibv_qp_attr a;
	int rc;
	if (from_reset) {
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_INIT;
		a.pkey_index = 0;
		a.port_num = ib->port;
		a.qkey = IB_QKEY;
		rc = ib->api->modify_qp(ib->qp, &a,
					IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
		if (rc)
			return rc;
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		rc = ib->api->modify_qp(ib->qp, &a, IBV_QP_STATE);
		if (rc)
			return rc;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ib->api->modify_qp(ib->qp, &a, IBV_QP_STATE | (from_reset ? IBV_QP_SQ_PSN : 0));
}

/* Takes back a receive buffer the NIC no longer holds (reset, flush). */
static void ib_reclaim_posted(struct nic_ib *ib, uint8_t *pkt)
{
	uint32_t slot = ib_slot_of(ib, pkt);
	if (slot < ib->rq_depth && ib->rx_state[slot] == IB_BUF_POSTED) {
		ib->rx_state[slot] = IB_BUF_HELD;
		ib_recycle(ib, pkt);
	}
}

static void ib_qp_recover(struct nic_ib *ib)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	ib->broken = false;
	if (ib->api->query_qp(ib->qp, &a, IBV_QP_STATE, &init))
		return;
	if (a.qp_state == IBV_QPS_RTS)
		return;
	if (a.qp_state == IBV_QPS_SQE) {
		int rc = ib_qp_to_rts(ib, false);
		log_warn("nic_ib: QP 0x%x back from SQE to RTS: %s", ib->qp->qp_num,
			 rc ? strerror(rc) : "ok");
		return;
	}
	log_warn("nic_ib: QP 0x%x in state %d; resetting it", ib->qp->qp_num, (int)a.qp_state);
	/* Receive completions still queued name buffers the reset takes back;
	 * packets among them are lost, which the rpc layer recovers from. */
	struct ibv_wc wc[IB_STASH];
	int n;
	for (unsigned i = ib->stash_i; i < ib->stash_n; i++)
		ib_reclaim_posted(ib, (uint8_t *)(uintptr_t)ib->stash[i].wr_id);
	ib->stash_i = ib->stash_n = 0;
	while ((n = ibv_poll_cq(ib->recv_cq, IB_STASH, wc)) > 0)
		for (int i = 0; i < n; i++)
			ib_reclaim_posted(ib, (uint8_t *)(uintptr_t)wc[i].wr_id);
	while (ibv_poll_cq(ib->send_cq, IB_STASH, wc) > 0)
		;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	if (ib->api->modify_qp(ib->qp, &a, IBV_QP_STATE))
		return;
	/* RESET discarded every posted receive and pending send. */
	for (uint32_t s = 0; s < ib->rq_depth; s++)
		ib_reclaim_posted(ib, ib_slot_pkt(ib, s));
	ib->rq_posted = 0;
	ib->sq_outstanding = 0;
	ib->unsignalled = 0;
	int rc = ib_qp_to_rts(ib, true);
	if (rc)
		log_error("nic_ib: QP 0x%x could not return to RTS: %s", ib->qp->qp_num,
			  strerror(rc));
	else
		ib_post_pending(ib);
}

/* ---- sleeping ---- */

static int ib_notify_fd(const struct nic *nic)
{
	return to_ib_c(nic)->chan->fd;
}

static int ib_arm_notify(struct nic *nic)
{
	struct nic_ib *ib = to_ib(nic);
	struct ibv_cq *cq;
	void *cq_ctx;
	/* The channel serves one CQ, and an armed CQ raises one event until
	 * it is armed again: a second read would only fail. */
	if (ib->api->get_cq_event(ib->chan, &cq, &cq_ctx) == 0)
		ib->events_unacked++;
	if (ib->events_unacked) {
		ib->api->ack_cq_events(ib->recv_cq, ib->events_unacked);
		ib->events_unacked = 0;
	}
	if (ib->n_pending)
		ib_post_pending(ib);
	if (ib->stash_i < ib->stash_n)
		return 1;
	int rc = ibv_req_notify_cq(ib->recv_cq, 0);
	if (rc)
		return -rc;
	/* A completion that landed before the arm raises no event: look. */
	int n = ibv_poll_cq(ib->recv_cq, IB_STASH, ib->stash);
	if (n < 0)
		return -EIO;
	ib->stash_i = 0;
	ib->stash_n = (unsigned)n;
	return n > 0;
}

/* ---- memory ---- */

static int ib_reg_mem(struct nic *nic, void *addr, size_t len, struct nic_mr *out)
{
	struct nic_ib *ib = to_ib(nic);
	struct ibv_mr *mr = ib->api->reg_mr(ib->pd, addr, len, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		return errno ? -errno : -ENOMEM;
	out->lkey = mr->lkey;
	out->handle = mr;
	return 0;
}

static void ib_dereg_mem(struct nic *nic, struct nic_mr *mr)
{
	struct nic_ib *ib = to_ib(nic);
	if (mr->handle)
		ib->api->dereg_mr(mr->handle);
	mr->handle = NULL;
}

static bool ib_pins_memory(const struct nic *nic)
{
	return to_ib_c(nic)->api->pins_memory;
}

/* ---- routes and peers ---- */

static void ib_local_route(const struct nic *nic, struct nic_route *out)
{
	const struct nic_ib *ib = to_ib_c(nic);
	memset(out, 0, sizeof(*out));
	out->kind = (uint8_t)ib->api->kind;
	out->len = IB_ROUTE_LEN;
	uint16_t lid = htons(ib->lid);
	uint32_t qpn = htonl(ib->qp->qp_num), qkey = htonl(IB_QKEY);
	memcpy(out->data, ib->gid.raw, 16);
	memcpy(out->data + 16, &lid, 2);
	memcpy(out->data + 18, &qpn, 4);
	memcpy(out->data + 22, &qkey, 4);
}

static void ib_route_fixup(const struct nic *nic, struct nic_route *route,
			   const struct sockaddr *seen, socklen_t seen_len)
{
	/* GID, LID and QPN are complete as sent; what the management channel
	 * saw of the peer's IP address adds nothing. */
}

static void ib_route_format(const struct nic_route *r, char *buf, size_t cap)
{
	if (r->len != IB_ROUTE_LEN) {
		snprintf(buf, cap, "ib route of %u bytes (bad)", r->len);
		return;
	}
	char gid[INET6_ADDRSTRLEN];
	uint16_t lid;
	uint32_t qpn, qkey;
	inet_ntop(AF_INET6, r->data, gid, sizeof(gid));
	memcpy(&lid, r->data + 16, 2);
	memcpy(&qpn, r->data + 18, 4);
	memcpy(&qkey, r->data + 22, 4);
	snprintf(buf, cap, "%s gid %s lid %u qpn 0x%x qkey 0x%x",
		 nic_transport_name((enum ferry_transport_kind)r->kind), gid, ntohs(lid), ntohl(qpn),
		 ntohl(qkey));
}

struct ibv_ah *ib_make_ah(struct nic_ib *ib, const uint8_t *gid, uint16_t lid)
{
	struct ibv_ah_attr a;
	memset(&a, 0, sizeof(a));
	a.dlid = lid;
	a.port_num = ib->port;
	a.is_global = ib->global;
	if (ib->global) {
		memcpy(a.grh.dgid.raw, gid, 16);
		a.grh.sgid_index = (uint8_t)ib->gid_index;
		a.grh.hop_limit = 64;
	}
	return ib->api->create_ah(ib->pd, &a);
}

static int ib_peer_create(struct nic *nic, const struct nic_route *route, struct nic_peer **out)
{
	struct nic_ib *ib = to_ib(nic);
	if (route->kind != ib->api->kind || route->len != IB_ROUTE_LEN)
		return -EPROTOTYPE;
	uint16_t lid;
	uint32_t qpn, qkey;
	memcpy(&lid, route->data + 16, 2);
	memcpy(&qpn, route->data + 18, 4);
	memcpy(&qkey, route->data + 22, 4);
	struct nic_peer *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->qpn = ntohl(qpn);
	p->qkey = ntohl(qkey);
	struct ib_ah_entry *e;
	HASH_FIND(hh, ib->ahs, route->data, 18, e);
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e) {
			free(p);
			return -ENOMEM;
		}
		memcpy(e->key, route->data, 18);
		errno = 0;
		e->ah = ib_make_ah(ib, route->data, ntohs(lid));
		if (!e->ah) {
			int err = errno ? errno : EHOSTUNREACH;
			free(e);
			free(p);
			return -err;
		}
		HASH_ADD(hh, ib->ahs, key, 18, e);
	}
	e->refs++;
	p->ahe = e;
	*out = p;
	ib->n_peers++;
	ib_set_rq_need(ib);
	return 0;
}

static void ib_peer_destroy(struct nic *nic, struct nic_peer *peer)
{
	struct nic_ib *ib = to_ib(nic);
	if (!peer)
		return;
	struct ib_ah_entry *e = peer->ahe;
	free(peer);
	ib->n_peers--;
	ib_set_rq_need(ib);
	if (--e->refs == 0) {
		/* Sends in flight may still name this AH. */
		ib_flush(nic);
		HASH_DEL(ib->ahs, e);
		ib->api->destroy_ah(e->ah);
		free(e);
	}
}

static void ib_close(struct nic *nic)
{
	ib_destroy(to_ib(nic));
}

const struct nic_ops nic_ib_ops = {
	.tx_burst = ib_tx_burst,
	.rx_burst = ib_rx_burst,
	.post_recvs = ib_post_recvs,
	.flush = ib_flush,
	.notify_fd = ib_notify_fd,
	.arm_notify = ib_arm_notify,
	.reg_mem = ib_reg_mem,
	.dereg_mem = ib_dereg_mem,
	.pins_memory = ib_pins_memory,
	.local_route = ib_local_route,
	.route_fixup = ib_route_fixup,
	.peer_create = ib_peer_create,
	.peer_destroy = ib_peer_destroy,
	.route_format = ib_route_format,
	.close = ib_close,
};
