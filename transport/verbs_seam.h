/*
 * The one seam between nic_ib and a verbs provider: libibverbs' control-path
 * calls as a table of function pointers, with two instances, the real
 * libibverbs (verbs_seam.c) and compat/softib.
 *
 * Why a table: libibverbs' non-inline calls (ibv_alloc_pd, ibv_reg_mr,
 * ibv_create_qp, ...) dispatch through provider machinery private to
 * libibverbs, which a device living outside it cannot join. The datapath
 * calls (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are
 * static inline in verbs.h and dispatch through ibv_context.ops, which
 * softib fills, so nic_ib calls those directly on either provider.
 *
 * Every function has libibverbs' signature and return convention (NULL or
 * a positive errno / -1 with errno, exactly as verbs.h documents), except
 * get_device_list, which takes the softib fabric name (ignored by the real
 * library).
 */
#ifndef FERRY_VERBS_SEAM_H
#define FERRY_VERBS_SEAM_H

#include <infiniband/verbs.h>

struct verbs_api {
	const char *name; /* "libibverbs" or "softib" */
	struct ibv_device **(*get_device_list)(const char *fabric, int *num);
	void (*free_device_list)(struct ibv_device **list);
	const char *(*get_device_name)(struct ibv_device *dev);
	struct ibv_context *(*open_device)(struct ibv_device *dev);
	int (*close_device)(struct ibv_context *ctx);
	int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
	int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
	/* ibv_query_gid_ex with flags 0: the GID and its type (RoCE v1/v2, IB). */
	int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port, uint32_t index,
			    struct ibv_gid_entry *entry);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
	int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
	struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *ch, int comp_vector);
	int (*destroy_cq)(struct ibv_cq *cq);
	int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
	void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
	int (*query_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
			struct ibv_qp_init_attr *init);
	int (*destroy_qp)(struct ibv_qp *qp);
	struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
	int (*destroy_ah)(struct ibv_ah *ah);
};

/* libibverbs itself. */
extern const struct verbs_api verbs_api_ibverbs;
/* compat/softib's shared-memory device. */
extern const struct verbs_api verbs_api_softib;

#endif
