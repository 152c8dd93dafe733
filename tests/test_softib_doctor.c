/* ferry-doctor: reports what it must and says what to fix. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/softib_fixture.h"
#include "transport/verbs_seam.h"

static char out[16384];

/* Runs ferry-doctor with only the given environment; returns its exit code. */
static int doctor(const char *env)
{
	const char *dir = getenv("FERRY_TEST_BUILDDIR");
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "env -i PATH=/usr/bin:/bin %s %s/ferry-doctor 2>&1", env,
		 dir ? dir : ".");
	FILE *f = popen(cmd, "r");
	cr_assert_not_null(f);
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	int st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(doctor, reports_memory_privileges_and_opens_softib)
{
	char fabric[128], env[256];
	softib_test_fabric(fabric, sizeof(fabric), "doctor");
	snprintf(env, sizeof(env), "FERRY_TRANSPORT=softib FERRY_SOFTIB_FABRIC=%s", fabric);
	int rc = doctor(env);
	softib_test_fabric_remove(fabric);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert(strstr(out, "RLIMIT_MEMLOCK"), "%s", out);
	cr_assert(strstr(out, "hugepages"), "%s", out);
	cr_assert(strstr(out, "capabilities"), "%s", out);
	cr_assert(strstr(out, "softib: usable"), "%s", out);
	cr_assert(strstr(out, "opens the softib datapath"), "%s", out);
}

/* ferry-doctor looks at softib whatever the transport: each run names a
 * fabric of its own, removed afterwards, never the shared "default". */
static int doctor_own_fabric(const char *env)
{
	char fabric[128], full[512];
	softib_test_fabric(fabric, sizeof(fabric), "doctor");
	snprintf(full, sizeof(full), "FERRY_SOFTIB_FABRIC=%s %s", fabric, env);
	int rc = doctor(full);
	softib_test_fabric_remove(fabric);
	return rc;
}

Test(doctor, a_bad_setting_is_a_fix_line_and_a_failure)
{
	cr_assert_eq(doctor_own_fabric("FERRY_TRANSPORT=rdma"), 1);
	cr_assert(strstr(out, "FIX") && strstr(out, "FERRY_TRANSPORT=rdma"), "%s", out);
}

Test(doctor, without_a_device_it_says_so_and_names_what_works)
{
	int n = 0;
	struct ibv_device **list = verbs_api_ibverbs.get_device_list(NULL, &n);
	if (list)
		verbs_api_ibverbs.free_device_list(list);
	if (n > 0)
		cr_skip_test("this host has an RDMA device");
	cr_assert_eq(doctor_own_fabric("FERRY_TRANSPORT=ib"), 1);
	cr_assert(strstr(out, "no RDMA device"), "%s", out);
	cr_assert(strstr(out, "udp") && strstr(out, "softib"), "%s", out);
	cr_assert(strstr(out, "FIX"), "%s", out);
}
