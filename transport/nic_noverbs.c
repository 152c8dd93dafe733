/* A ferry built without libibverbs (configure found no libibverbs-dev):
 * ib and softib are named, so a setting that asks for them is understood,
 * and refused with what to do. */
#include "autoconfig.h"

#include "transport/nic.h"

#include <errno.h>
#include <stdio.h>

#include "transport/config.h"

static struct nic *nic_noverbs(const struct ferry_config *cfg, int *err, char *msg, size_t msglen)
{
	if (msg && msglen)
		snprintf(msg, msglen,
			 "this ferry was built without libibverbs, so FERRY_TRANSPORT=%s is not in it: "
			 "use udp, or install libibverbs-dev and build again",
			 nic_transport_name(cfg->transport));
	*err = -EPROTONOSUPPORT;
	return NULL;
}

struct nic *nic_verbs_open_ib(const struct ferry_config *cfg, struct ferry_stats *stats, int *err,
			      char *msg, size_t msglen)
{
	(void)stats;
	return nic_noverbs(cfg, err, msg, msglen);
}

struct nic *nic_verbs_open_softib(const struct ferry_config *cfg, struct ferry_stats *stats,
				  int *err, char *msg, size_t msglen)
{
	(void)stats;
	return nic_noverbs(cfg, err, msg, msglen);
}
