/* ferry-doctor's look at the verbs datapaths: RDMA devices, their ports
 * and GIDs (ib), and the shared-memory fabric (softib). */
#include "autoconfig.h"

#include "compat/doctor.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "compat/softib/softib.h"
#include "transport/config.h"
#include "transport/verbs_seam.h"

static const char *port_state(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_ACTIVE: return "ACTIVE";
	case IBV_PORT_DOWN: return "DOWN";
	case IBV_PORT_INIT: return "INIT";
	case IBV_PORT_ARMED: return "ARMED";
	default: return "other";
	}
}

static const char *gid_type(uint32_t t)
{
	switch (t) {
	case IBV_GID_TYPE_IB: return "IB";
	case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
	case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
	default: return "?";
	}
}

static void doctor_port(const struct verbs_api *api, struct ibv_context *ctx, uint8_t p,
			bool *active)
{
	struct ibv_port_attr pa;
	if (api->query_port(ctx, p, &pa)) {
		doctor_say("warn", "port %u: query failed", p);
		return;
	}
	const char *ll = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand";
	doctor_say(pa.state == IBV_PORT_ACTIVE ? "ok" : "warn", "port %u: %s, link layer %s, MTU %u, LID %u",
	    p, port_state(pa.state), ll, 128u << pa.active_mtu, pa.lid);
	if (pa.state == IBV_PORT_ACTIVE)
		*active = true;
	else
		doctor_say("FIX", "port %u is not active: check the cable/switch (ibstat), or the netdev "
		    "for RoCE (ip link set DEV up)", p);
	unsigned valid = 0;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		static const uint8_t zero[16];
		if (api->query_gid_ex(ctx, p, (uint32_t)i, &e) || !memcmp(e.gid.raw, zero, 16))
			continue;
		char s[INET6_ADDRSTRLEN];
		inet_ntop(AF_INET6, e.gid.raw, s, sizeof(s));
		doctor_say("", "  gid[%d] %s (%s)", i, s, gid_type(e.gid_type));
		valid++;
	}
	if (!valid && pa.link_layer == IBV_LINK_LAYER_ETHERNET)
		doctor_say("FIX", "port %u has no GIDs: give its netdev an IP address", p);
}

static void doctor_devices(const struct verbs_api *api, const struct ferry_config *cfg,
			   bool *usable)
{
	const char *why = api->unavailable ? api->unavailable() : NULL;
	if (why) {
		doctor_say("info", "%s", why);
		doctor_say("info", "datapaths that work here: udp (any IP network) and softib "
			    "(processes on this host; FERRY_TRANSPORT=softib)");
		return;
	}
	int n = 0;
	struct ibv_device **list = api->get_device_list(cfg, &n);
	if (!list || n == 0) {
		struct stat st;
		bool sys = stat("/sys/class/infiniband", &st) == 0;
		doctor_say("info", "no RDMA device (%s)", sys ? "/sys/class/infiniband is empty"
						       : "the kernel has no RDMA support loaded");
		doctor_say("info", "datapaths that work here: udp (any IP network) and softib "
			    "(processes on this host; FERRY_TRANSPORT=softib)");
		doctor_say("info", "for ib: install an RDMA NIC, or load a software device "
			    "(modprobe rdma_rxe; rdma link add rxe0 type rxe netdev ETH)");
		if (list)
			api->free_device_list(list);
		return;
	}
	for (int i = 0; i < n; i++) {
		const char *name = api->get_device_name(list[i]);
		struct ibv_context *ctx = api->open_device(list[i]);
		if (!ctx) {
			doctor_say("FIX", "%s: cannot open (%s): check /dev/infiniband permissions "
				   "(group rdma?)", name, strerror(errno));
			continue;
		}
		struct ibv_device_attr da;
		if (api->query_device(ctx, &da) == 0) {
			doctor_say("ok", "device %s: %u port(s), max %d QPs, fw %s", name, da.phys_port_cnt,
			    da.max_qp, da.fw_ver);
			for (unsigned p = 1; p <= da.phys_port_cnt; p++)
				doctor_port(api, ctx, (uint8_t)p, usable);
		}
		api->close_device(ctx);
	}
	api->free_device_list(list);
}

void doctor_softib(const struct ferry_config *cfg)
{
	const char *fabric = cfg->softib_fabric;
	char dir[64];
	softib_fabric_dir(dir, sizeof(dir));
	const char *name = fabric[0] ? fabric : "default";
	int n = 0;
	const struct verbs_api *api = &verbs_api_softib;
	struct ibv_device **list = api->get_device_list(cfg, &n);
	errno = 0;
	struct ibv_context *ctx = list && n ? api->open_device(list[0]) : NULL;
	int err = errno;
	if (list)
		api->free_device_list(list);
	if (!ctx && err == EPROTO)
		doctor_say("FIX", "softib: %s/%s.fabric is stale or from another softib version: stop the "
			   "processes using it and remove it",
		    dir, name);
	else if (!ctx && err == EPERM)
		doctor_say("FIX", "softib: %s must be a directory owned by you with mode 0700", dir);
	else if (!ctx)
		doctor_say("FIX", "softib: cannot open fabric '%s' in %s (%s): /dev/shm must be a writable "
			   "tmpfs",
		    name, dir, strerror(err));
	if (!ctx)
		return;
	unsigned reclaimed = softib_reclaim(ctx);
	doctor_say("ok", "softib: usable, fabric '%s' in %s, %u live QP(s)%s", name, dir,
	    softib_live_qps(ctx), reclaimed ? " (reclaimed some of dead processes)" : "");
	api->close_device(ctx);
}

void doctor_rdma(const struct ferry_config *cfg, bool *active)
{
	doctor_devices(&verbs_api_ibverbs, cfg, active);
}
