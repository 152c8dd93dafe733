/*
 * softib: a software verbs device over shared memory, for hosts without an
 * RDMA NIC. Reach it through verbs_api_softib, its instance of the verbs
 * seam (transport/verbs_seam.h); the objects it returns are the public
 * libibverbs types, and ibv_post_send, ibv_post_recv, ibv_poll_cq and
 * ibv_req_notify_cq work on them directly. The other functions here are
 * for tests and ferry-doctor (and the receive-area pair also the seam's
 * optional hooks).
 */
#ifndef FERRY_SOFTIB_H
#define FERRY_SOFTIB_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/verbs_seam.h"

/* softib's verbs seam: get_device_list opens cfg->softib_fabric ("default"
 * when empty or cfg is NULL). */
extern const struct verbs_api verbs_api_softib;

/* Per-QP counters the fabric keeps (a NIC's port counters, per QP). */
struct softib_qp_counters {
	uint64_t rx_pkts;      /* packets placed in the QP's ring */
	uint64_t drop_no_recv; /* no receive posted */
	uint64_t drop_qkey;    /* QKey mismatch */
	uint64_t drop_state;   /* QP not in RTR or later */
	uint64_t rx_direct;    /* written by the sender straight into a posted buffer */
	uint64_t drop_malformed; /* ring entries no sender could have written (the
				    receiver's count: the ring's own are writable) */
};

int softib_qp_counters(struct ibv_qp *qp, struct softib_qp_counters *out);

/*
 * Receive buffers with one copy instead of two: the next QP created on ctx
 * gets an area of len bytes (0: none) in its ring file, which its senders
 * map. A receive posted with a single SGE inside the area (registered like
 * any memory) is written by the sender itself, GRH and payload, instead of
 * being staged in the ring and copied again at ibv_poll_cq.
 */
int softib_set_rx_area(struct ibv_context *ctx, size_t len);

/* The QP's area (and its length), or NULL if it has none. */
void *softib_qp_rx_area(struct ibv_qp *qp, size_t *len);

/* Frees directory slots and rings of processes that died; returns how many. */
unsigned softib_reclaim(struct ibv_context *ctx);

/* QPs the fabric's directory lists as live. */
unsigned softib_live_qps(struct ibv_context *ctx);

/* Whether the fabric's directory lists qpn as a live QP. */
bool softib_qpn_live(struct ibv_context *ctx, uint32_t qpn);

/*
 * Removes a fabric's files after reclaiming the queues of dead processes.
 * Returns 0, EBUSY if a live process still has a QP on it (nothing removed),
 * or another errno. For tests that made a fabric of their own; a fabric
 * shared by many processes needs no removal, since each open reclaims.
 */
int softib_fabric_remove(const char *fabric);

/* The per-user directory holding fabrics (/dev/shm/ferry-softib-<uid>). */
int softib_fabric_dir(char *buf, size_t cap);

#endif
