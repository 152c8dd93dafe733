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

#include "compat/doctor.h"
#include "preload/config.h"
#include "transport/config.h"
#include "transport/log.h"
#include "transport/nic.h"

/* A process with the ib datapath locks its receive ring (about 4 MiB) and
 * buffer pool regions of 2 MiB each, at least one. */
#define DOCTOR_MEMLOCK_MIN (8ull << 20)

static unsigned n_fix;

void doctor_say(const char *tag, const char *fmt, ...)
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
		doctor_say("info", "capabilities: %s", text && *text ? text : "(none)");
		cap_free(text);
		cap_free(caps);
	}
	if (getrlimit(RLIMIT_MEMLOCK, &rl)) {
		doctor_say("warn", "RLIMIT_MEMLOCK: getrlimit failed");
		return;
	}
	if (rl.rlim_cur == RLIM_INFINITY) {
		doctor_say("ok", "RLIMIT_MEMLOCK: unlimited");
	} else if (ipc_lock) {
		doctor_say("ok", "RLIMIT_MEMLOCK: %llu KiB, but CAP_IPC_LOCK lifts it",
		    (unsigned long long)rl.rlim_cur / 1024);
	} else if (rl.rlim_cur < DOCTOR_MEMLOCK_MIN) {
		doctor_say("FIX", "RLIMIT_MEMLOCK is %llu KiB; the ib datapath locks at least %llu KiB per "
			   "process: ulimit -l unlimited, or '* - memlock unlimited' in "
			   "/etc/security/limits.conf, or LimitMEMLOCK=infinity (systemd), or "
			   "setcap cap_ipc_lock+ep PROGRAM (udp and softib need none of this)",
		    (unsigned long long)rl.rlim_cur / 1024, DOCTOR_MEMLOCK_MIN / 1024);
	} else {
		doctor_say("ok", "RLIMIT_MEMLOCK: %llu KiB (ferry needs about %llu KiB per process, more "
			  "with many large messages)",
		    (unsigned long long)rl.rlim_cur / 1024, DOCTOR_MEMLOCK_MIN / 1024);
	}
}

static void doctor_hugepages(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	if (!f) {
		doctor_say("warn", "hugepages: /proc/meminfo unreadable");
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
		doctor_say("ok", "hugepages: %ld of %ld free (%ld kB each)", free_, total, size_kb);
	else
		doctor_say("warn", "hugepages: %ld free of %ld; buffers use ordinary pages (fine; for "
			    "fewer NIC translation misses: sysctl vm.nr_hugepages=512)",
		    free_ < 0 ? 0 : free_, total < 0 ? 0 : total);
}

static int doctor_transport(const struct ferry_config *cfg)
{
	int err = 0;
	char msg[512] = "";
	struct nic *nic = nic_open(cfg, NULL, &err, msg, sizeof(msg));
	if (!nic) {
		doctor_say("FIX", "FERRY_TRANSPORT=%s does not open: %s", nic_transport_name(cfg->transport),
		    msg[0] ? msg : strerror(-err));
		return 1;
	}
	struct nic_route r;
	char route[160];
	nic_local_route(nic, &r);
	nic_route_format(nic, &r, route, sizeof(route));
	doctor_say("ok", "FERRY_TRANSPORT=%s opens the %s datapath: %u-byte packets, route %s",
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
		doctor_say("FIX", "%s", err);
		return 1;
	}
	doctor_say("ok", "FERRY_TRANSPORT=%s", nic_transport_name(cfg.transport));
	ferry_log_init(FERRY_LOG_ERROR, NULL);

	printf("\nRDMA devices (libibverbs)\n");
	bool active = false;
	doctor_rdma(&cfg, &active);

	printf("\nmemory and privileges\n");
	doctor_memlock();
	doctor_hugepages();

	printf("\nsoftib (same-host verbs device)\n");
	doctor_softib(&cfg);

	printf("\ndatapath\n");
	if (cfg.transport == FERRY_TRANSPORT_IB && !active)
		doctor_say("info", "no active RDMA port: FERRY_TRANSPORT=ib cannot work here");
	int rc = doctor_transport(&cfg);
	if (cfg.transport != FERRY_TRANSPORT_SOFTIB && cfg.transport != FERRY_TRANSPORT_UDP)
		doctor_say("info", "auto picks ib when a device with an active port opens, else udp; "
			    "softib only when asked for");
	printf("\n%s\n", n_fix ? "something to fix: see the FIX lines" : "nothing to fix");
	return rc;
}
