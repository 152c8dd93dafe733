/* The libibverbs seam opens the library only when the kernel shows a verbs
 * device, and says plainly when it cannot. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/nic.h"
#include "transport/verbs_seam.h"

static char sysfs[PATH_MAX];

/* A stand-in for /sys/class/infiniband_verbs, with a device or without. */
static void fake_sysfs(bool with_device)
{
	snprintf(sysfs, sizeof(sysfs), "/tmp/ferry-test-verbs-%d", (int)getpid());
	cr_assert_eq(mkdir(sysfs, 0700), 0);
	if (with_device) {
		char dev[PATH_MAX + 16];
		snprintf(dev, sizeof(dev), "%s/uverbs0", sysfs);
		cr_assert_eq(mkdir(dev, 0700), 0);
	}
}

static void fake_sysfs_remove(void)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", sysfs);
	cr_assert_eq(system(cmd), 0);
}

static bool ibverbs_mapped(void)
{
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (h)
		dlclose(h);
	return h != NULL;
}

Test(verbs_load, no_device_no_library)
{
	cr_assert(!ibverbs_mapped(), "the test itself must not link libibverbs");
	fake_sysfs(false);
	verbs_ibverbs_test_paths("libibverbs.so.1", sysfs);
	int n = -1;
	struct ibv_device **list = verbs_api_ibverbs.get_device_list(NULL, &n);
	cr_assert_null(list);
	cr_assert_eq(n, 0);
	cr_assert_null(verbs_api_ibverbs.unavailable());
	cr_assert(!ibverbs_mapped(), "a host without a verbs device loaded libibverbs");
	fake_sysfs_remove();
}

Test(verbs_load, a_missing_library_is_named_with_what_to_install)
{
	fake_sysfs(true);
	verbs_ibverbs_test_paths("libibverbs-ferry-test-missing.so.1", sysfs);
	const char *why = verbs_api_ibverbs.unavailable();
	cr_assert_not_null(why);
	cr_assert(strstr(why, "libibverbs-ferry-test-missing.so.1"), "%s", why);
	cr_assert(strstr(why, "apt-get install libibverbs1"), "%s", why);
	int n = -1;
	errno = 0;
	cr_assert_null(verbs_api_ibverbs.get_device_list(NULL, &n));
	cr_assert_eq(n, 0);
	cr_assert_eq(errno, ELIBACC);

	/* The ib datapath refuses with the same words, not "no device". */
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	cfg.transport = FERRY_TRANSPORT_IB;
	int err = 0;
	char msg[512] = "";
	struct nic *nic = nic_open(&cfg, NULL, &err, msg, sizeof(msg));
	cr_assert_null(nic);
	cr_assert(strstr(msg, "libibverbs-ferry-test-missing.so.1"), "%s", msg);
	fake_sysfs_remove();
}

Test(verbs_load, a_device_loads_the_library)
{
	fake_sysfs(true);
	verbs_ibverbs_test_paths("libibverbs.so.1", sysfs);
	cr_assert_null(verbs_api_ibverbs.unavailable());
	cr_assert(ibverbs_mapped());
	int n = -1;
	struct ibv_device **list = verbs_api_ibverbs.get_device_list(NULL, &n);
	/* The library looks in the real sysfs: this host may have none. */
	cr_assert(n >= 0);
	if (list)
		verbs_api_ibverbs.free_device_list(list);
	fake_sysfs_remove();
}

Test(verbs_load, completion_statuses_read_without_the_library)
{
	cr_assert_str_eq(verbs_wc_status_name(IBV_WC_SUCCESS), "success");
	cr_assert_str_eq(verbs_wc_status_name(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error");
	cr_assert_str_eq(verbs_wc_status_name((enum ibv_wc_status)999), "unknown");
}
