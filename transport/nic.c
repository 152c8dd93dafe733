/* The table of datapaths FERRY_TRANSPORT names, and nic_open, which opens
 * the one named and says why not. */
#include "autoconfig.h"

#include "transport/nic.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "transport/config.h"
#include "transport/log.h"

static void nic_set_msg(char *msg, size_t msglen, const char *text)
{
	if (msg && msglen)
		snprintf(msg, msglen, "%s", text);
}

/* auto: ib when a real verbs device with an active port opens, else udp.
 * softib is never chosen here: it only reaches processes on this host, so
 * it must be asked for by name. */
static struct nic *nic_open_auto(const struct ferry_config *cfg, struct ferry_stats *stats,
				 int *err, char *msg, size_t msglen)
{
	char why[256] = "";
	int ib_err = 0;
	struct nic *nic = nic_verbs_open_ib(cfg, stats, &ib_err, why, sizeof(why));
	if (nic) {
		log_info("transport auto: using ib (%s)", nic->name);
		return nic;
	}
	log_info("transport auto: ib skipped: %s; using udp", why[0] ? why : "no usable device");
	return nic_udp_open(cfg, stats, err, msg, msglen);
}

static struct nic *nic_open_test(const struct ferry_config *cfg, struct ferry_stats *stats,
				 int *err, char *msg, size_t msglen)
{
	(void)cfg;
	(void)stats;
	nic_set_msg(msg, msglen,
		    "FERRY_TRANSPORT=test is for protocol tests, which open the test nic "
		    "directly (nic_test_open)");
	*err = -EINVAL;
	return NULL;
}

const struct nic_transport nic_transports[] = {
	{.name = "auto", .kind = FERRY_TRANSPORT_AUTO, .open = nic_open_auto,
	 .description = "ib when an RDMA device with an active port opens, else udp"},
	{.name = "udp", .kind = FERRY_TRANSPORT_UDP, .open = nic_udp_open,
	 .description = "kernel UDP, batched: any IP network"},
	{.name = "ib", .kind = FERRY_TRANSPORT_IB, .open = nic_verbs_open_ib,
	 .description = "RDMA UD queue pairs through libibverbs (InfiniBand, RoCE)"},
	{.name = "softib", .kind = FERRY_TRANSPORT_SOFTIB, .open = nic_verbs_open_softib,
	 .description = "software verbs over shared memory: processes on this host only"},
	{.name = "test", .kind = FERRY_TRANSPORT_TEST, .open = nic_open_test,
	 .description = NULL},
};
const unsigned nic_n_transports = sizeof(nic_transports) / sizeof(nic_transports[0]);

const struct nic_transport *nic_transport_find(const char *name)
{
	for (unsigned i = 0; i < nic_n_transports; i++)
		if (!strcmp(nic_transports[i].name, name))
			return &nic_transports[i];
	return NULL;
}

const struct nic_transport *nic_transport_of(enum ferry_transport_kind kind)
{
	for (unsigned i = 0; i < nic_n_transports; i++)
		if (nic_transports[i].kind == kind)
			return &nic_transports[i];
	return NULL;
}

const char *nic_transport_name(enum ferry_transport_kind kind)
{
	const struct nic_transport *t = nic_transport_of(kind);
	return t ? t->name : "?";
}

size_t nic_transport_list(char *buf, size_t cap, const char *sep)
{
	size_t used = 0;
	if (cap)
		buf[0] = '\0';
	for (unsigned i = 0; i < nic_n_transports; i++) {
		if (!nic_transports[i].description)
			continue;
		int n = snprintf(buf + used, cap > used ? cap - used : 0, "%s%s",
				 used ? sep : "", nic_transports[i].name);
		used += n > 0 ? (size_t)n : 0;
	}
	return used;
}

struct nic *nic_open(const struct ferry_config *cfg, struct ferry_stats *stats, int *err,
		     char *msg, size_t msglen)
{
	int dummy;
	if (!err)
		err = &dummy;
	*err = 0;
	const struct nic_transport *t = nic_transport_of(cfg->transport);
	if (!t) {
		nic_set_msg(msg, msglen, "unknown FERRY_TRANSPORT value");
		*err = -EINVAL;
		return NULL;
	}
	return t->open(cfg, stats, err, msg, msglen);
}

/* A look numbered after a taken wake-up began after that wake-up's packet
 * was queued, so it saw the packet; the look a wake-up's taker read may
 * have come before the packet. */
bool nic_rx_drained(const struct nic *n)
{
	uint64_t look = __atomic_load_n(&n->rx_looks, __ATOMIC_ACQUIRE);
	return look && __atomic_load_n(&n->rx_empty_look, __ATOMIC_ACQUIRE) == look &&
	       __atomic_load_n(&n->rx_notified_look, __ATOMIC_ACQUIRE) != look;
}

void nic_rx_notified(struct nic *n)
{
	uint64_t look = __atomic_load_n(&n->rx_looks, __ATOMIC_ACQUIRE);
	uint64_t seen = __atomic_load_n(&n->rx_notified_look, __ATOMIC_RELAXED);
	while (seen < look && !__atomic_compare_exchange_n(&n->rx_notified_look, &seen, look, false,
							     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		;
}
