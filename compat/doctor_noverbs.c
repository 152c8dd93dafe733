/* ferry-doctor in a ferry built without libibverbs: the verbs datapaths
 * are not in it, and the report says how to get them. */
#include "autoconfig.h"

#include "compat/doctor.h"

void doctor_rdma(const struct ferry_config *cfg, bool *active)
{
	(void)cfg;
	*active = false;
	doctor_say("info", "built without libibverbs: no ib datapath (install libibverbs-dev and "
			   "build again)");
}

void doctor_softib(const struct ferry_config *cfg)
{
	(void)cfg;
	doctor_say("info", "built without libibverbs: no softib datapath");
}
