/* nic_open: picks the datapath FERRY_TRANSPORT names and says why. */
#include "autoconfig.h"

#include "transport/nic.h"

#include <errno.h>
#include <stdio.h>

#include "compat/softib/softib.h"
#include "transport/config.h"
#include "transport/log.h"
#include "transport/verbs_seam.h"

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
	struct nic *nic = nic_ib_open(cfg, stats, &verbs_api_ibverbs, &ib_err, why, sizeof(why));
	if (nic) {
		log_info("transport auto: using ib (%s)", nic->name);
		return nic;
	}
	log_info("transport auto: ib skipped: %s; using udp", why[0] ? why : "no usable device");
	return nic_udp_open(cfg, stats, err, msg, msglen);
}

struct nic *nic_open(const struct ferry_config *cfg, struct ferry_stats *stats, int *err,
		     char *msg, size_t msglen)
{
	int dummy;
	if (!err)
		err = &dummy;
	*err = 0;
	switch (cfg->transport) {
	case FERRY_TRANSPORT_AUTO:
		return nic_open_auto(cfg, stats, err, msg, msglen);
	case FERRY_TRANSPORT_UDP:
		return nic_udp_open(cfg, stats, err, msg, msglen);
	case FERRY_TRANSPORT_IB:
		return nic_ib_open(cfg, stats, &verbs_api_ibverbs, err, msg, msglen);
	case FERRY_TRANSPORT_SOFTIB:
		return nic_ib_open(cfg, stats, &verbs_api_softib, err, msg, msglen);
	case FERRY_TRANSPORT_TEST:
		nic_set_msg(msg, msglen,
			    "FERRY_TRANSPORT=test is for protocol tests, which open the test nic "
			    "directly (nic_test_open)");
		*err = -EINVAL;
		return NULL;
	}
	nic_set_msg(msg, msglen, "unknown FERRY_TRANSPORT value");
	*err = -EINVAL;
	return NULL;
}
