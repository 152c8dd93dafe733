/* The registered buffer pool: classes, reuse, limits, and the memlock check. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/resource.h>

#include "transport/nic_test.h"
#include "transport/pkthdr.h"
#include "transport/pool.h"

static struct nic_test_fabric *fabric;
static struct nic *nic;
static struct pool *pool;

static void setup(void)
{
	fabric = nic_test_fabric_create();
	nic = nic_test_open(fabric, 4096, 16, NULL);
	char msg[256];
	int err;
	pool = pool_create(nic, &err, msg, sizeof(msg));
	cr_assert_not_null(pool, "%s", msg);
}

static void teardown(void)
{
	pool_destroy(pool);
	nic_close(nic);
	nic_test_fabric_destroy(fabric);
}

TestSuite(pool, .init = setup, .fini = teardown);

Test(pool, chunks_are_distinct_writable_and_big_enough)
{
	struct pool_chunk *c[64];
	size_t sz[64];
	for (int i = 0; i < 64; i++) {
		sz[i] = (size_t)1 << (i % 20);
		c[i] = pool_alloc(pool, sz[i]);
		cr_assert_not_null(c[i]);
		memset(c[i]->addr, i, sz[i]);
	}
	for (int i = 0; i < 64; i++)
		for (size_t k = 0; k < sz[i]; k += 97)
			cr_assert_eq(c[i]->addr[k], (uint8_t)i, "chunk %d overwritten", i);
	for (int i = 0; i < 64; i++)
		pool_free(pool, c[i]);
}

Test(pool, freed_chunk_is_reused)
{
	struct pool_chunk *a = pool_alloc(pool, 3000);
	uint8_t *addr = a->addr;
	size_t reserved = pool_reserved_bytes(pool);
	pool_free(pool, a);
	struct pool_chunk *b = pool_alloc(pool, 2500);
	cr_assert_eq(b->addr, addr);
	cr_assert_eq(pool_reserved_bytes(pool), reserved);
	pool_free(pool, b);
}

Test(pool, largest_message_fits_and_beyond_is_refused)
{
	struct pool_chunk *big = pool_alloc(pool, RPC_MAX_MSG_SIZE + (1u << 20));
	cr_assert_not_null(big);
	big->addr[RPC_MAX_MSG_SIZE] = 1;
	pool_free(pool, big);
	cr_assert_null(pool_alloc(pool, (size_t)1 << 30));
}

static void drop_cap_ipc_lock(void)
{
	cap_t caps = cap_get_proc();
	cap_value_t v = CAP_IPC_LOCK;
	cap_set_flag(caps, CAP_EFFECTIVE, 1, &v, CAP_CLEAR);
	cap_set_flag(caps, CAP_PERMITTED, 1, &v, CAP_CLEAR);
	cr_assert_eq(cap_set_proc(caps), 0);
	cap_free(caps);
}

Test(pool, memlock_limit_names_the_fix)
{
	drop_cap_ipc_lock(); /* criterion runs each test in its own process */
	struct rlimit rl = {.rlim_cur = 64 * 1024, .rlim_max = 64 * 1024};
	cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	char msg[512] = "";
	cr_assert_eq(pool_check_memlock(0, 32 * 1024, msg, sizeof(msg)), 0);
	cr_assert_eq(pool_check_memlock(16 * 1024, 1 << 20, msg, sizeof(msg)), -ENOMEM);
	cr_assert(strstr(msg, "RLIMIT_MEMLOCK is 64 KiB"), "%s", msg);
	cr_assert(strstr(msg, "ulimit -l"), "%s", msg);
	cr_assert(strstr(msg, "CAP_IPC_LOCK"), "%s", msg);
}

Test(pool, capability_lifts_the_memlock_limit)
{
	char msg[256];
	cap_t caps = cap_get_proc();
	cap_flag_value_t have = CAP_CLEAR;
	cap_get_flag(caps, CAP_IPC_LOCK, CAP_EFFECTIVE, &have);
	cap_free(caps);
	if (have != CAP_SET)
		cr_skip_test("needs CAP_IPC_LOCK (run as root)");
	cr_assert_eq(pool_check_memlock(0, 1u << 30, msg, sizeof(msg)), 0);
}
