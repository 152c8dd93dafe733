/* nic_ib's device: choosing the port and GID the configuration asks for,
 * creating the queue pair and its receive ring, and tearing it all down. */
#include "autoconfig.h"

#include "transport/nic_ib_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "transport/config.h"
#include "transport/log.h"
#include "transport/stats.h"
#include "transport/sys.h"

void ib_destroy(struct nic_ib *ib)
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
	const char *why = ib->api->unavailable ? ib->api->unavailable() : NULL;
	if (why)
		return ib_fail(-ENODEV, msg, msglen, "%s%s; use FERRY_TRANSPORT=udp, or softib on one host",
			       why, "");
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
	ib->credits = ferry_session_credits(cfg, ib->base.max_pkt_size);
	ib->base.max_session_credits = ib->credits;
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
