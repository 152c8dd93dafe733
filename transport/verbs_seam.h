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
 * get_device_list, which takes the configuration so a provider can read
 * what selects its devices (softib: FERRY_SOFTIB_FABRIC; cfg may be NULL
 * for the defaults; the real library ignores it).
 *
 * Where providers differ beyond those calls, the table says so in its data
 * fields and optional hooks, so nic_ib never asks which provider it holds.
 * Each provider declares its instance in its own header: libibverbs' here,
 * softib's in compat/softib/softib.h.
 */
#ifndef FERRY_VERBS_SEAM_H
#define FERRY_VERBS_SEAM_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/config.h"

struct verbs_api {
	const char *name; /* the provider, for messages: "libibverbs", "softib" */
	/* What a nic_ib on this provider is: its nic name and route kind
	 * (routes of another kind are refused). */
	enum ferry_transport_kind kind;
	/* Packets cross switches whose queues Timely can measure
	 * (nic->switched_fabric); false for shared memory. */
	bool switched_fabric;
	/* reg_mr locks pages, so RLIMIT_MEMLOCK applies (nic_pins_memory). */
	bool pins_memory;
	/* UD messages may be this long, past the port's MTU, as far as the
	 * port's max_msg_sz allows; 0 on real UD, where the MTU is the limit. */
	uint32_t ud_max_msg;

	struct ibv_device **(*get_device_list)(const struct ferry_config *cfg, int *num);
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

	/*
	 * Optional (NULL: the provider has none). A receive area inside the QP:
	 * set_rx_area asks that the next QP created on ctx get len bytes its
	 * senders may write into directly (0 or a positive errno); qp_rx_area
	 * returns that QP's area and its length, or NULL. Memory the area
	 * holds is registered like any other and goes away with the QP.
	 */
	int (*set_rx_area)(struct ibv_context *ctx, size_t len);
	void *(*qp_rx_area)(struct ibv_qp *qp, size_t *len);
	/* Optional: why the provider cannot be used at all (its library is
	 * missing, say), or NULL when it can. */
	const char *(*unavailable)(void);
};

/* libibverbs itself, opened at the first device list that finds a verbs
 * device in sysfs (without one, nothing is loaded); the calls other than
 * the device list are filled in then, so none is used before it. */
extern struct verbs_api verbs_api_ibverbs;

/* Tests: devices are looked for in sysfs_dir, and the library opened is
 * soname, as if never tried before. */
void verbs_ibverbs_test_paths(const char *soname, const char *sysfs_dir);

/* A work completion's status in words, without libibverbs loaded (softib
 * has none). */
const char *verbs_wc_status_name(enum ibv_wc_status st);

#endif
