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

#include "transport/nic.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <uthash.h>

#include "transport/config.h"
#include "transport/log.h"
#include "transport/stats.h"
#include "transport/sys.h"
#include "transport/verbs_seam.h"

#define IB_GRH_BYTES 40u
/* Receive slots put the packet header at a 64-byte boundary, GRH in front. */
#define IB_RX_HEADROOM 64u
/* Whatever the packet size: fewer buffers would drop the windows of more
 * sessions. With softib's 64 KiB packets that is 64 MiB of address space,
 * touched only as far as packets reach. */
#define IB_RQ_DEPTH 1024u
/*
 * Not all of them are posted while packets are big, though. Receives
 * complete in the order they were posted, so every buffer on the queue is
 * written once per trip round it: 1024 posted buffers taking 64 KiB packets
 * sweep 64 MiB, more than the last-level cache, and every packet costs a
 * trip to DRAM on both sides (on softib, half the bandwidth). So posted are
 * as many as IB_RQ_BYTES holds at the packets' recent average size, but
 * never fewer than the peers may have in flight towards us -- per session
 * its credits of requests and requests-for-response, as many answers to
 * ours -- plus what may wait to be posted again (IB_RECV_BATCH). The rest
 * wait in the pending stack, most recently freed (still cached) on top.
 * The smaller the sweep the better (on softib 5 MiB measured faster than
 * 8 MiB, with a 32 MiB L3): one session at 32 credits posts 80.
 */
#define IB_RQ_RESERVE 16u
#define IB_RQ_BYTES (4u << 20)
/* The largest packet, on a provider whose UD messages go past the MTU
 * (verbs_api.ud_max_msg): the receive ring holds IB_RQ_DEPTH of them. */
#define IB_MAX_PKT 65536u
#define IB_SQ_DEPTH 256u
/* Receives go back to the NIC in post lists of at least this many... */
#define IB_RECV_BATCH 16u
/* ...unless fewer than a quarter of rq_target remain posted. */
#define IB_TX_CHUNK 32u
_Static_assert(IB_RQ_RESERVE >= IB_RECV_BATCH, "the reserve covers receives not yet posted again");
#define IB_STASH 32u
#define IB_INLINE_WANT 256u
/* The QKey every ferry QP uses; the high bit must stay clear (privileged). */
#define IB_QKEY 0x0FE77A11u
#define IB_ROUTE_LEN 26u
#define IB_FLUSH_TIMEOUT_NS 1000000000ull

enum ib_buf_state { IB_BUF_POSTED, IB_BUF_HELD, IB_BUF_PENDING };

struct ib_ah_entry {
	uint8_t key[18]; /* GID + LID: one AH per remote port */
	struct ibv_ah *ah;
	unsigned refs;
	UT_hash_handle hh;
};

struct nic_peer {
	struct ib_ah_entry *ahe;
	uint32_t qpn;
	uint32_t qkey;
};

struct nic_ib {
	struct nic base;
	const struct verbs_api *api;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *chan;
	struct ibv_cq *send_cq, *recv_cq;
	struct ibv_qp *qp;
	uint8_t port;
	int gid_index;
	union ibv_gid gid;
	uint16_t lid;
	bool global; /* RoCE: every AH carries a GRH */
	uint32_t max_inline;

	/* Send queue: every post list ends with a signalled WR whose wr_id is the
	 * number of WRs it retires; sq_outstanding counts WRs not yet retired. */
	uint32_t sq_depth;
	uint32_t sq_outstanding;
	uint32_t unsignalled; /* posted unsignalled WRs no signalled WR covers yet */
	struct ibv_ah *self_ah;

	/* Receive ring: rq_depth slots of rx_stride bytes in one region. */
	uint8_t *rx_mem;
	size_t rx_mem_len;
	bool rx_in_qp; /* the QP's own area (api->qp_rx_area), gone with the QP */
	struct ibv_mr *rx_mr;
	uint32_t rx_stride, rq_depth, rq_posted;
	uint32_t rq_target; /* receives to keep posted (ib_update_rq_target) */
	uint32_t rq_need;   /* what the peers may send unasked, and the reserve */
	uint32_t credits;   /* per session direction, from the config */
	uint32_t n_peers;
	uint32_t rx_avg_len; /* of packets received lately (moving average) */
	uint8_t *rx_state; /* enum ib_buf_state per slot */
	uint8_t **pending;
	uint32_t n_pending;

	/* Completions arm_notify found while checking whether to sleep. */
	struct ibv_wc stash[IB_STASH];
	unsigned stash_n, stash_i;
	unsigned events_unacked;

	struct ib_ah_entry *ahs;
	bool broken; /* an error completion was seen: check the QP state */
};

static struct nic_ib *to_ib(struct nic *nic)
{
	return (struct nic_ib *)nic;
}

static const struct nic_ib *to_ib_c(const struct nic *nic)
{
	return (const struct nic_ib *)nic;
}

static uint64_t ib_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t ib_mtu_bytes(enum ibv_mtu mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0;
}

/* ---- receive ring ---- */

static uint32_t ib_slot_of(const struct nic_ib *ib, const uint8_t *pkt)
{
	return (uint32_t)((size_t)(pkt - ib->rx_mem - IB_RX_HEADROOM) / ib->rx_stride);
}

static uint8_t *ib_slot_pkt(const struct nic_ib *ib, uint32_t slot)
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

static void ib_recycle(struct nic_ib *ib, uint8_t *pkt)
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
}

static void ib_set_rq_need(struct nic_ib *ib)
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
				 ibv_wc_status_str(wc->status), wc->byte_len);
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
					 ibv_wc_status_str(wc[i].status));
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

static void ib_flush(struct nic *nic)
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
static int ib_qp_to_rts(struct nic_ib *ib, bool from_reset)
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
	while (ib->api->get_cq_event(ib->chan, &cq, &cq_ctx) == 0)
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

static struct ibv_ah *ib_make_ah(struct nic_ib *ib, const uint8_t *gid, uint16_t lid)
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

/* ---- open and close ---- */

static void ib_destroy(struct nic_ib *ib)
{
	const struct verbs_api *api = ib->api;
	if (ib->qp && ib->send_cq)
		ib_flush(&ib->base);
	struct ib_ah_entry *e, *tmp;
	HASH_ITER(hh, ib->ahs, e, tmp)
	{
		HASH_DEL(ib->ahs, e);
		api->destroy_ah(e->ah);
		free(e);
	}
	if (ib->self_ah)
		api->destroy_ah(ib->self_ah);
	if (ib->qp)
		api->destroy_qp(ib->qp);
	if (ib->events_unacked)
		api->ack_cq_events(ib->recv_cq, ib->events_unacked);
	if (ib->recv_cq)
		api->destroy_cq(ib->recv_cq);
	if (ib->send_cq)
		api->destroy_cq(ib->send_cq);
	if (ib->chan)
		api->destroy_comp_channel(ib->chan);
	if (ib->rx_mr)
		api->dereg_mr(ib->rx_mr);
	if (ib->rx_mem && !ib->rx_in_qp)
		munmap(ib->rx_mem, ib->rx_mem_len);
	if (ib->pd)
		api->dealloc_pd(ib->pd);
	if (ib->ctx)
		api->close_device(ib->ctx);
	free(ib->rx_state);
	free(ib->pending);
	free(ib);
}

static void ib_close(struct nic *nic)
{
	ib_destroy(to_ib(nic));
}

static const struct nic_ops nic_ib_ops = {
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

static int ib_fail(int err, char *msg, size_t msglen, const char *fmt, const char *a,
		   const char *b)
{
	if (msg && msglen)
		snprintf(msg, msglen, fmt, a, b);
	return err;
}

/* The first active port of an open device (or the one FERRY_IB_PORT names). */
static int ib_pick_port(struct nic_ib *ib, const struct ferry_config *cfg,
			struct ibv_port_attr *pa)
{
	struct ibv_device_attr da;
	if (ib->api->query_device(ib->ctx, &da))
		return -EIO;
	for (unsigned p = 1; p <= da.phys_port_cnt; p++) {
		if (cfg->ib_port && p != cfg->ib_port)
			continue;
		if (ib->api->query_port(ib->ctx, (uint8_t)p, pa) == 0 &&
		    pa->state == IBV_PORT_ACTIVE) {
			ib->port = (uint8_t)p;
			return 0;
		}
	}
	return -ENETDOWN;
}

static int ib_gid_score(const struct ibv_gid_entry *e, bool roce)
{
	static const uint8_t zero[16];
	static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (!memcmp(e->gid.raw, zero, 16))
		return 0;
	if (!roce)
		return 1;
	if (e->gid_type == IBV_GID_TYPE_ROCE_V2)
		return memcmp(e->gid.raw, v4mapped, 12) ? 2 : 3;
	return 1;
}

/* FERRY_GID_INDEX, or the best entry: RoCE v2 with an IPv4 address, then
 * any RoCE v2, then anything valid (InfiniBand: index 0). */
static int ib_pick_gid(struct nic_ib *ib, const struct ferry_config *cfg, int tbl_len,
		       char *msg, size_t msglen)
{
	struct ibv_gid_entry e;
	if (cfg->gid_index >= 0) {
		if (ib->api->query_gid_ex(ib->ctx, ib->port, (uint32_t)cfg->gid_index, &e) ||
		    ib_gid_score(&e, ib->global) == 0) {
			char idx[16];
			snprintf(idx, sizeof(idx), "%d", cfg->gid_index);
			return ib_fail(-EINVAL, msg, msglen,
				       "FERRY_GID_INDEX=%s is not a valid GID entry on %s "
				       "(see ferry-doctor for the table)",
				       idx, ib->api->get_device_name(ib->ctx->device));
		}
		ib->gid_index = cfg->gid_index;
		ib->gid = e.gid;
		return 0;
	}
	int best = -1, best_score = 0;
	for (int i = 0; i < tbl_len; i++) {
		if (ib->api->query_gid_ex(ib->ctx, ib->port, (uint32_t)i, &e))
			continue;
		int s = ib_gid_score(&e, ib->global);
		if (s > best_score) {
			best_score = s;
			best = i;
			ib->gid = e.gid;
		}
	}
	if (best < 0) {
		if (ib->global)
			return ib_fail(-EADDRNOTAVAIL, msg, msglen,
				       "%s has no valid GID on its RoCE port%s: give the netdev an "
				       "IP address",
				       ib->api->get_device_name(ib->ctx->device), "");
		memset(&ib->gid, 0, sizeof(ib->gid));
		best = 0;
	}
	ib->gid_index = best;
	return 0;
}

static int ib_open_device(struct nic_ib *ib, const struct ferry_config *cfg,
			  struct ibv_port_attr *pa, char *msg, size_t msglen)
{
	int num = 0;
	errno = 0;
	struct ibv_device **list = ib->api->get_device_list(cfg, &num);
	if (!list || num == 0) {
		int err = errno;
		if (list)
			ib->api->free_device_list(list);
		return ib_fail(-ENODEV, msg, msglen,
			       "no RDMA device found (%s%s); use FERRY_TRANSPORT=udp, or softib "
			       "on one host, and run ferry-doctor",
			       ib->api->name, err ? ": device list failed" : "");
	}
	char names[256] = "";
	int rc = -ENODEV;
	for (int i = 0; i < num && !ib->ctx; i++) {
		const char *name = ib->api->get_device_name(list[i]);
		size_t used = strlen(names);
		snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "", name);
		if (cfg->device[0] && strcmp(cfg->device, name))
			continue;
		ib->ctx = ib->api->open_device(list[i]);
		if (!ib->ctx) {
			rc = errno ? -errno : -ENODEV;
			continue;
		}
		rc = ib_pick_port(ib, cfg, pa);
		if (rc) {
			ib->api->close_device(ib->ctx);
			ib->ctx = NULL;
		}
	}
	ib->api->free_device_list(list);
	if (ib->ctx)
		return 0;
	if (cfg->device[0] && !strstr(names, cfg->device))
		return ib_fail(-ENODEV, msg, msglen, "FERRY_DEVICE=%s: no such verbs device (have: %s)",
			       cfg->device, names);
	if (rc == -ENETDOWN)
		return ib_fail(-ENETDOWN, msg, msglen,
			       "no active port on %s%s (check the link and FERRY_IB_PORT; "
			       "ibv_devinfo shows port states)",
			       names, "");
	return ib_fail(rc, msg, msglen, "could not open %s: %s (run ferry-doctor)", names,
		       strerror(-rc));
}

static int ib_create_qp(struct nic_ib *ib, const struct ibv_device_attr *da)
{
	static const uint32_t inline_try[] = {IB_INLINE_WANT, 128, 64, 0};
	for (unsigned t = 0; t < sizeof(inline_try) / sizeof(inline_try[0]); t++) {
		struct ibv_qp_init_attr qa;
		memset(&qa, 0, sizeof(qa));
		qa.send_cq = ib->send_cq;
		qa.recv_cq = ib->recv_cq;
		qa.qp_type = IBV_QPT_UD;
		qa.sq_sig_all = 0;
		qa.cap.max_send_wr = ib->sq_depth;
		qa.cap.max_recv_wr = ib->rq_depth;
		qa.cap.max_send_sge = 2;
		qa.cap.max_recv_sge = 1;
		qa.cap.max_inline_data = inline_try[t];
		ib->qp = ib->api->create_qp(ib->pd, &qa);
		if (ib->qp) {
			ib->max_inline = qa.cap.max_inline_data;
			return 0;
		}
	}
	(void)da;
	return errno ? -errno : -EINVAL;
}

struct nic *nic_ib_open(const struct ferry_config *cfg, struct ferry_stats *stats,
			const struct verbs_api *api, int *err, char *msg, size_t msglen)
{
	int dummy, rc;
	if (!err)
		err = &dummy;
	struct nic_ib *ib = calloc(1, sizeof(*ib));
	if (!ib) {
		*err = -ENOMEM;
		return NULL;
	}
	ib->api = api;
	ib->base.ops = &nic_ib_ops;
	ib->base.name = nic_transport_name(api->kind);
	ib->base.switched_fabric = api->switched_fabric;
	ib->base.stats = stats;

	struct ibv_port_attr pa;
	rc = ib_open_device(ib, cfg, &pa, msg, msglen);
	if (rc)
		goto fail;
	const char *dev = ib->api->get_device_name(ib->ctx->device);
	ib->global = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	ib->lid = pa.lid;
	rc = ib_pick_gid(ib, cfg, pa.gid_tbl_len, msg, msglen);
	if (rc)
		goto fail;

	uint32_t mtu = ib_mtu_bytes(pa.active_mtu);
	if (mtu == 0) {
		rc = ib_fail(-EINVAL, msg, msglen, "%s reports an unknown MTU%s", dev, "");
		goto fail;
	}
	/* A provider may carry more than its MTU in one UD message (softib,
	 * doc/softib.md): fewer, bigger packets where nothing is on a wire. */
	if (ib->api->ud_max_msg > mtu && pa.max_msg_sz > mtu) {
		uint32_t most = ib->api->ud_max_msg < IB_MAX_PKT ? ib->api->ud_max_msg : IB_MAX_PKT;
		mtu = pa.max_msg_sz < most ? pa.max_msg_sz : most;
	}
	if (cfg->mtu && cfg->mtu < mtu)
		mtu = cfg->mtu;
	else if (cfg->mtu > mtu)
		log_info("nic_ib: FERRY_MTU=%u is over %s's port MTU; using %u", cfg->mtu, dev, mtu);
	ib->base.max_pkt_size = mtu;

	struct ibv_device_attr da;
	if (ib->api->query_device(ib->ctx, &da)) {
		rc = ib_fail(-EIO, msg, msglen, "ibv_query_device(%s) failed%s", dev, "");
		goto fail;
	}
	ib->sq_depth = IB_SQ_DEPTH < (uint32_t)da.max_qp_wr ? IB_SQ_DEPTH : (uint32_t)da.max_qp_wr;
	ib->rx_stride = IB_RX_HEADROOM + ((mtu + 63u) & ~63u);
	ib->rq_depth = IB_RQ_DEPTH < (uint32_t)da.max_qp_wr ? IB_RQ_DEPTH : (uint32_t)da.max_qp_wr;
	ib->rx_mem_len = (size_t)ib->rx_stride * ib->rq_depth;

	errno = 0;
	ib->pd = ib->api->alloc_pd(ib->ctx);
	ib->chan = ib->pd ? ib->api->create_comp_channel(ib->ctx) : NULL;
	if (ib->chan) {
		ib->send_cq = ib->api->create_cq(ib->ctx, (int)ib->sq_depth, ib, NULL, 0);
		ib->recv_cq = ib->api->create_cq(ib->ctx, (int)ib->rq_depth, ib, ib->chan, 0);
	}
	if (!ib->recv_cq || !ib->send_cq) {
		rc = errno ? -errno : -ENOMEM;
		ib_fail(rc, msg, msglen, "creating PD, completion channel and CQs on %s failed: %s",
			dev, strerror(-rc));
		goto fail;
	}
	/* arm_notify drains events without blocking. */
	int fl = sys()->fcntl(ib->chan->fd, F_GETFL);
	if (fl < 0 || sys()->fcntl(ib->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		rc = -errno;
		ib_fail(rc, msg, msglen, "completion channel of %s: fcntl: %s", dev, strerror(errno));
		goto fail;
	}
	/* Receive buffers in the QP's own area, written by senders (softib). */
	if (ib->api->set_rx_area && ib->api->set_rx_area(ib->ctx, ib->rx_mem_len))
		log_warn("nic_ib: %s refused a receive area of %zu bytes", ib->api->name,
			 ib->rx_mem_len);
	rc = ib_create_qp(ib, &da);
	if (rc) {
		ib_fail(rc, msg, msglen, "creating a UD QP on %s failed: %s", dev, strerror(-rc));
		goto fail;
	}
	rc = ib_qp_to_rts(ib, true);
	if (rc) {
		rc = -rc;
		ib_fail(rc, msg, msglen, "moving the UD QP on %s to RTS failed: %s", dev,
			strerror(-rc));
		goto fail;
	}

	/* The receive ring: one region, registered once. */
	size_t area_len = 0;
	void *mem = ib->api->qp_rx_area ? ib->api->qp_rx_area(ib->qp, &area_len) : NULL;
	if (mem && area_len >= ib->rx_mem_len) {
		ib->rx_in_qp = true;
	} else {
		mem = mmap(NULL, ib->rx_mem_len, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mem == MAP_FAILED) {
			rc = -errno;
			ib_fail(rc, msg, msglen, "receive ring: mmap: %s%s", strerror(errno), "");
			goto fail;
		}
	}
	/* A forked child has no business with our receive buffers. */
	madvise(mem, ib->rx_mem_len, MADV_DONTFORK);
	ib->rx_mem = mem;
	ib->rx_state = calloc(ib->rq_depth, 1);
	ib->pending = calloc(ib->rq_depth, sizeof(*ib->pending));
	errno = 0;
	ib->rx_mr = ib->rx_state && ib->pending
			    ? ib->api->reg_mr(ib->pd, mem, ib->rx_mem_len, IBV_ACCESS_LOCAL_WRITE)
			    : NULL;
	if (!ib->rx_mr) {
		rc = errno ? -errno : -ENOMEM;
		ib_fail(rc, msg, msglen,
			"registering the receive ring on %s failed: %s (RLIMIT_MEMLOCK? run ferry-doctor)",
			dev, strerror(-rc));
		goto fail;
	}
	/* Slot 0 on top of the stack: the first posted are the lowest. */
	for (uint32_t s = ib->rq_depth; s-- > 0;) {
		ib->rx_state[s] = IB_BUF_HELD;
		ib_recycle(ib, ib_slot_pkt(ib, s));
	}
	ib->credits = cfg->session_credits;
	ib_set_rq_need(ib);

	errno = 0;
	ib->self_ah = ib_make_ah(ib, ib->gid.raw, ib->lid);
	if (!ib->self_ah) {
		rc = errno ? -errno : -EHOSTUNREACH;
		ib_fail(rc, msg, msglen, "creating an address handle to %s itself failed: %s", dev,
			strerror(-rc));
		goto fail;
	}
	char gid[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, ib->gid.raw, gid, sizeof(gid));
	log_info("nic_ib: %s port %u (%s) gid[%d] %s lid %u qpn 0x%x mtu %u inline %u", dev,
		 ib->port, ib->global ? "RoCE" : "InfiniBand", ib->gid_index, gid, ib->lid,
		 ib->qp->qp_num, mtu, ib->max_inline);
	*err = 0;
	return &ib->base;

fail:
	*err = rc;
	ib_destroy(ib);
	return NULL;
}
