/* Placeholder pools and RLIMIT_NOFILE: a new hidden descriptor does not
 * ask for the limit each time, yet follows it when the application lowers
 * or raises it (setrlimit, at any time). getrlimit is counted here: this
 * program's own definition serves the pools' calls. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload/phpool.h"

static int getrlimit_calls;

int getrlimit(__rlimit_resource_t resource, struct rlimit *rl)
{
	__atomic_add_fetch(&getrlimit_calls, 1, __ATOMIC_RELAXED);
	return prlimit(0, resource, NULL, rl);
}

TestSuite(phpool_limit, .timeout = 20);

static void files_limit_to(rlim_t n)
{
	struct rlimit rl;
	cr_assert_eq(prlimit(0, RLIMIT_NOFILE, NULL, &rl), 0);
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < n)
		cr_skip_test("hard RLIMIT_NOFILE %lu is under %lu", (unsigned long)rl.rlim_max,
			     (unsigned long)n);
	rl.rlim_cur = n;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

Test(phpool_limit, new_hidden_descriptors_use_the_limit_as_last_read)
{
	files_limit_to(256);
	cr_assert_not(phpool_pressure(3)); /* reads the limit */
	__atomic_store_n(&getrlimit_calls, 0, __ATOMIC_RELAXED);
	enum { N = 10 };
	int h[N];
	for (int i = 0; i < N; i++) { /* the pool is empty: each is a new socket */
		h[i] = phpool_take(AF_INET);
		cr_assert_geq(h[i], 128, "hidden descriptor %d at %d", i, h[i]);
	}
	cr_assert_eq(__atomic_load_n(&getrlimit_calls, __ATOMIC_RELAXED), 0,
		     "%d new sockets asked for the limit %d times", N, getrlimit_calls);
	for (int i = 0; i < N; i++)
		close(h[i]);
}

Test(phpool_limit, a_lowered_limit_is_followed)
{
	files_limit_to(1024);
	cr_assert_not(phpool_pressure(3));
	files_limit_to(256); /* half the old limit is past the new one */
	int h = phpool_take(AF_INET);
	cr_assert_geq(h, 128, "at half the new limit: %d", h);
	cr_assert_lt(h, 256);
	close(h);
}

Test(phpool_limit, a_raised_limit_is_followed_once_numbers_reach_the_old_floor)
{
	files_limit_to(256);
	cr_assert_not(phpool_pressure(3));
	files_limit_to(2048);
	/* The application's numbers reach half the old limit. */
	int fds[256], n = 0;
	for (;;) {
		int fd = dup(0);
		cr_assert_geq(fd, 0);
		fds[n++] = fd;
		if (fd >= 128)
			break;
	}
	int h = phpool_take(AF_INET);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	cr_assert_geq(h, 1024, "at half the new limit: %d", h);
	close(h);
}
