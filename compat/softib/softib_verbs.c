/* softib's instance of the verbs seam (placeholder until the device lands). */
#include <errno.h>
#include <stddef.h>

#include "transport/verbs_seam.h"

static struct ibv_device **sib_get_device_list(const char *fabric, int *num)
{
	(void)fabric;
	*num = 0;
	errno = ENOSYS;
	return NULL;
}

const struct verbs_api verbs_api_softib = {
	.name = "softib",
	.get_device_list = sib_get_device_list,
};
