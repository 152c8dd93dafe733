/* The verbs datapaths as FERRY_TRANSPORT opens them: nic_ib on libibverbs
 * (ib) or on the shared-memory device (softib). */
#include "autoconfig.h"

#include "transport/nic.h"

#include "compat/softib/softib.h"
#include "transport/verbs_seam.h"

struct nic *nic_verbs_open_ib(const struct ferry_config *cfg, struct ferry_stats *stats, int *err,
			      char *msg, size_t msglen)
{
	return nic_ib_open(cfg, stats, &verbs_api_ibverbs, err, msg, msglen);
}

struct nic *nic_verbs_open_softib(const struct ferry_config *cfg, struct ferry_stats *stats,
				  int *err, char *msg, size_t msglen)
{
	return nic_ib_open(cfg, stats, &verbs_api_softib, err, msg, msglen);
}
