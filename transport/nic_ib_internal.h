/* What nic_ib.c (the datapath) and nic_ib_open.c (choosing the device,
 * opening and closing it) share; nothing else includes it. */
#ifndef FERRY_TRANSPORT_NIC_IB_INTERNAL_H
#define FERRY_TRANSPORT_NIC_IB_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <uthash.h>

#include "transport/nic.h"
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


static inline struct nic_ib *to_ib(struct nic *nic)
{
	return (struct nic_ib *)nic;
}

static inline const struct nic_ib *to_ib_c(const struct nic *nic)
{
	return (const struct nic_ib *)nic;
}

static inline uint32_t ib_mtu_bytes(enum ibv_mtu mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0;
}

/* nic_ib.c */
extern const struct nic_ops nic_ib_ops;
uint8_t *ib_slot_pkt(const struct nic_ib *ib, uint32_t slot);
/* A receive buffer the stack is done with goes back (posted or pending). */
void ib_recycle(struct nic_ib *ib, uint8_t *pkt);
void ib_set_rq_need(struct nic_ib *ib);
void ib_flush(struct nic *nic);
int ib_qp_to_rts(struct nic_ib *ib, bool from_reset);
struct ibv_ah *ib_make_ah(struct nic_ib *ib, const uint8_t *gid, uint16_t lid);

/* nic_ib_open.c */
/* Frees everything ib holds, ib too; any part may be missing. */
void ib_destroy(struct nic_ib *ib);

#endif
