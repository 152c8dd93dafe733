/*
 * A thread's waiter: a wake from another thread ends its sleep, and an
 * eventfd count that arrives after the waiter consumed the waker's flag
 * (it woke for another reason in between) is drained at the next sleep
 * instead of ending every later sleep at once.
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "preload/wait.h"

static bool efd_empty(struct waiter *w)
{
	uint64_t v;
	ssize_t r = read(w->efd, &v, sizeof(v));
	if (r == sizeof(v))
		return false;
	cr_assert(r < 0 && errno == EAGAIN);
	return true;
}

/* The count a waker writes, landing with the waiter's flag already clear. */
static void late_count(struct waiter *w)
{
	cr_assert_eq(__atomic_load_n(&w->signaled, __ATOMIC_ACQUIRE), 0);
	uint64_t one = 1;
	cr_assert_eq(write(w->efd, &one, sizeof(one)), sizeof(one));
}

Test(wait_wake, a_late_count_is_drained_by_an_epoll_sleep)
{
	struct waiter *w = wait_self();
	cr_assert(w);
	late_count(w);
	struct timespec zero = {0, 0};
	cr_assert_geq(wait_block(w, NULL, 0, &zero, NULL), 0);
	cr_assert(efd_empty(w), "the count stayed: every later sleep would end at once");
}

Test(wait_wake, a_late_count_is_drained_by_a_poll_sleep)
{
	struct waiter *w = wait_self();
	cr_assert(w);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	late_count(w);
	struct pollfd k[3] = {{.fd = p[0], .events = POLLIN}};
	struct timespec zero = {0, 0};
	cr_assert_eq(wait_block(w, k, 1, &zero, NULL), 0, "the pipe is not readable");
	cr_assert(efd_empty(w), "the count stayed: every later sleep would end at once");
	close(p[0]);
	close(p[1]);
}

static void *waker(void *arg)
{
	usleep(20000);
	wait_wake(arg);
	return NULL;
}

Test(wait_wake, another_threads_wake_ends_the_sleep_and_is_consumed)
{
	struct waiter *w = wait_self();
	cr_assert(w);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, waker, w), 0);
	/* No timeout: only the wake can end it (the test's timeout otherwise). */
	cr_assert_geq(wait_block(w, NULL, 0, NULL, NULL), 0);
	pthread_join(t, NULL);
	cr_assert_eq(__atomic_load_n(&w->signaled, __ATOMIC_ACQUIRE), 0);
	cr_assert(efd_empty(w));
}

TestSuite(wait_wake, .timeout = 20);
