/*
 * ferry-doctor (also `ferry-run --check`): what this machine offers ferry's
 * datapaths and exactly what to change. Reads the same FERRY_* variables as
 * the library and ends by opening the configured datapath for real.
 * Exit status 0 when that datapath opens, 1 otherwise.
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compat/softib/softib.h"
#include "preload/config.h"
#include "transport/config.h"
#include "transport/log.h"
#include "transport/nic.h"
#include "transport/verbs_seam.h"

/* A process with the ib datapath locks its receive ring (about 4 MiB) and
 * buffer pool regions of 2 MiB each, at least one. */
#define DOCTOR_MEMLOCK_MIN (8ull << 20)

static unsigned n_fix;

static void say(const char *tag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *tag, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("  %-5s ", tag);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	if (!strcmp(tag, "FIX"))
		n_fix++;
}

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
		say("warn", "port %u: query failed", p);
		return;
	}
	const char *ll = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand";
	say(pa.state == IBV_PORT_ACTIVE ? "ok" : "warn", "port %u: %s, link layer %s, MTU %u, LID %u",
	    p, port_state(pa.state), ll, 128u << pa.active_mtu, pa.lid);
	if (pa.state == IBV_PORT_ACTIVE)
		*active = true;
	else
		say("FIX", "port %u is not active: check the cable/switch (ibstat), or the netdev "
		    "for RoCE (ip link set DEV up)", p);
	unsigned valid = 0;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		static const uint8_t zero[16];
		if (api->query_gid_ex(ctx, p, (uint32_t)i, &e) || !memcmp(e.gid.raw, zero, 16))
			continue;
		char s[INET6_ADDRSTRLEN];
		inet_ntop(AF_INET6, e.gid.raw, s, sizeof(s));
		say("", "  gid[%d] %s (%s)", i, s, gid_type(e.gid_type));
		valid++;
	}
	if (!valid && pa.link_layer == IBV_LINK_LAYER_ETHERNET)
		say("FIX", "port %u has no GIDs: give its netdev an IP address", p);
}

static void doctor_devices(const struct verbs_api *api, const struct ferry_config *cfg,
			   bool *usable)
{
	int n = 0;
	struct ibv_device **list = api->get_device_list(cfg, &n);
	if (!list || n == 0) {
		struct stat st;
		bool sys = stat("/sys/class/infiniband", &st) == 0;
		say("info", "no RDMA device (%s)", sys ? "/sys/class/infiniband is empty"
						       : "the kernel has no RDMA support loaded");
		say("info", "datapaths that work here: udp (any IP network) and softib "
			    "(processes on this host; FERRY_TRANSPORT=softib)");
		say("info", "for ib: install an RDMA NIC, or load a software device "
			    "(modprobe rdma_rxe; rdma link add rxe0 type rxe netdev ETH)");
		if (list)
			api->free_device_list(list);
		return;
	}
	for (int i = 0; i < n; i++) {
		const char *name = api->get_device_name(list[i]);
		struct ibv_context *ctx = api->open_device(list[i]);
		if (!ctx) {
			say("FIX", "%s: cannot open (%s): check /dev/infiniband permissions "
				   "(group rdma?)", name, strerror(errno));
			continue;
		}
		struct ibv_device_attr da;
		if (api->query_device(ctx, &da) == 0) {
			say("ok", "device %s: %u port(s), max %d QPs, fw %s", name, da.phys_port_cnt,
			    da.max_qp, da.fw_ver);
			for (unsigned p = 1; p <= da.phys_port_cnt; p++)
				doctor_port(api, ctx, (uint8_t)p, usable);
		}
		api->close_device(ctx);
	}
	api->free_device_list(list);
}

static void doctor_memlock(void)
{
	struct rlimit rl;
	bool ipc_lock = false;
	cap_t caps = cap_get_proc();
	if (caps) {
		cap_flag_value_t v = CAP_CLEAR;
		cap_get_flag(caps, CAP_IPC_LOCK, CAP_EFFECTIVE, &v);
		ipc_lock = v == CAP_SET;
		char *text = cap_to_text(caps, NULL);
		say("info", "capabilities: %s", text && *text ? text : "(none)");
		cap_free(text);
		cap_free(caps);
	}
	if (getrlimit(RLIMIT_MEMLOCK, &rl)) {
		say("warn", "RLIMIT_MEMLOCK: getrlimit failed");
		return;
	}
	if (rl.rlim_cur == RLIM_INFINITY) {
		say("ok", "RLIMIT_MEMLOCK: unlimited");
	} else if (ipc_lock) {
		say("ok", "RLIMIT_MEMLOCK: %llu KiB, but CAP_IPC_LOCK lifts it",
		    (unsigned long long)rl.rlim_cur / 1024);
	} else if (rl.rlim_cur < DOCTOR_MEMLOCK_MIN) {
		say("FIX", "RLIMIT_MEMLOCK is %llu KiB; the ib datapath locks at least %llu KiB per "
			   "process: ulimit -l unlimited, or '* - memlock unlimited' in "
			   "/etc/security/limits.conf, or LimitMEMLOCK=infinity (systemd), or "
			   "setcap cap_ipc_lock+ep PROGRAM (udp and softib need none of this)",
		    (unsigned long long)rl.rlim_cur / 1024, DOCTOR_MEMLOCK_MIN / 1024);
	} else {
		say("ok", "RLIMIT_MEMLOCK: %llu KiB (ferry needs about %llu KiB per process, more "
			  "with many large messages)",
		    (unsigned long long)rl.rlim_cur / 1024, DOCTOR_MEMLOCK_MIN / 1024);
	}
}

static void doctor_hugepages(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f) {
		say("warn", "hugepages: /proc/meminfo unreadable");
		return;
	}
	char line[256];
	long total = -1, free_ = -1, size_kb = 0;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "HugePages_Total: %ld", &total);
		sscanf(line, "HugePages_Free: %ld", &free_);
		sscanf(line, "Hugepagesize: %ld kB", &size_kb);
	}
	fclose(f);
	if (total > 0 && free_ > 0)
		say("ok", "hugepages: %ld of %ld free (%ld kB each)", free_, total, size_kb);
	else
		say("warn", "hugepages: %ld free of %ld; buffers use ordinary pages (fine; for "
			    "fewer NIC translation misses: sysctl vm.nr_hugepages=512)",
		    free_ < 0 ? 0 : free_, total < 0 ? 0 : total);
}

static void doctor_softib(const struct ferry_config *cfg)
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
		say("FIX", "softib: %s/%s.fabric is stale or from another softib version: stop the "
			   "processes using it and remove it",
		    dir, name);
	else if (!ctx && err == EPERM)
		say("FIX", "softib: %s must be a directory owned by you with mode 0700", dir);
	else if (!ctx)
		say("FIX", "softib: cannot open fabric '%s' in %s (%s): /dev/shm must be a writable "
			   "tmpfs",
		    name, dir, strerror(err));
	if (!ctx)
		return;
	unsigned reclaimed = softib_reclaim(ctx);
	say("ok", "softib: usable, fabric '%s' in %s, %u live QP(s)%s", name, dir,
	    softib_live_qps(ctx), reclaimed ? " (reclaimed some of dead processes)" : "");
	api->close_device(ctx);
}

static int doctor_transport(const struct ferry_config *cfg)
{
	int err = 0;
	char msg[512] = "";
	struct nic *nic = nic_open(cfg, NULL, &err, msg, sizeof(msg));
	if (!nic) {
		say("FIX", "FERRY_TRANSPORT=%s does not open: %s", nic_transport_name(cfg->transport),
		    msg[0] ? msg : strerror(-err));
		return 1;
	}
	struct nic_route r;
	char route[160];
	nic_local_route(nic, &r);
	nic_route_format(nic, &r, route, sizeof(route));
	say("ok", "FERRY_TRANSPORT=%s opens the %s datapath: %u-byte packets, route %s",
	    nic_transport_name(cfg->transport), nic->name, nic->max_pkt_size, route);
	nic_close(nic);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: ferry-doctor [--transports]\nReports RDMA devices, ports, GIDs, "
		       "RLIMIT_MEMLOCK, hugepages and capabilities,\nthen opens the datapath "
		       "FERRY_TRANSPORT names. Exit 0 if it opens.\n"
		       "--transports lists FERRY_TRANSPORT's values, one per line: name, a tab, "
		       "what it is.\n");
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "--transports")) {
		/* ferry-run's help and its --transport check read this. */
		for (unsigned i = 0; i < nic_n_transports; i++)
			if (nic_transports[i].description)
				printf("%s\t%s\n", nic_transports[i].name,
				       nic_transports[i].description);
		return 0;
	}
	struct ferry_config cfg;
	struct preload_config pcfg; /* read so its variables are checked too */
	char err[256];
	printf("ferry-doctor\n\nconfiguration\n");
	if (preload_config_from_env(&pcfg, &cfg, err, sizeof(err))) {
		say("FIX", "%s", err);
		return 1;
	}
	say("ok", "FERRY_TRANSPORT=%s", nic_transport_name(cfg.transport));
	ferry_log_init(FERRY_LOG_ERROR, NULL);

	printf("\nRDMA devices (libibverbs)\n");
	bool active = false;
	doctor_devices(&verbs_api_ibverbs, &cfg, &active);

	printf("\nmemory and privileges\n");
	doctor_memlock();
	doctor_hugepages();

	printf("\nsoftib (same-host verbs device)\n");
	doctor_softib(&cfg);

	printf("\ndatapath\n");
	if (cfg.transport == FERRY_TRANSPORT_IB && !active)
		say("info", "no active RDMA port: FERRY_TRANSPORT=ib cannot work here");
	int rc = doctor_transport(&cfg);
	if (cfg.transport != FERRY_TRANSPORT_SOFTIB && cfg.transport != FERRY_TRANSPORT_UDP)
		say("info", "auto picks ib when a device with an active port opens, else udp; "
			    "softib only when asked for");
	printf("\n%s\n", n_fix ? "something to fix: see the FIX lines" : "nothing to fix");
	return rc;
}
