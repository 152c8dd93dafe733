/* thread_pause: a held thread is parked where it holds nothing, one asleep
 * in the kernel is left asleep and parks as it wakes, holds nest, and a
 * thread that does not run is never waited for. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "transport/thread_pause.h"

struct worker {
	struct thread_pause pause;
	pthread_mutex_t work; /* held while it works: a held thread must not hold it */
	int wake;             /* eventfd it sleeps on, with no timeout */
	unsigned long rounds; /* atomic */
	int stop;             /* atomic */
	int spin;             /* atomic: keep working (holding work) while set */
	int working;          /* atomic: inside the work, past the pause point */
	pid_t tid;            /* atomic: the worker's thread id */
	pthread_t thread;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	__atomic_store_n(&w->tid, gettid(), __ATOMIC_RELEASE);
	/* Its only pause points are around its sleep: it works as soon as it
	 * wakes, as mgmt_main reads its sockets. */
	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&w->work);
		__atomic_store_n(&w->working, 1, __ATOMIC_RELEASE);
		__atomic_add_fetch(&w->rounds, 1, __ATOMIC_RELEASE);
		while (__atomic_load_n(&w->spin, __ATOMIC_ACQUIRE))
			sched_yield();
		__atomic_store_n(&w->working, 0, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&w->work);
		struct pollfd p = {.fd = w->wake, .events = POLLIN};
		thread_pause_sleep_begin(&w->pause);
		poll(&p, 1, -1);
		thread_pause_sleep_end(&w->pause);
		uint64_t v;
		ssize_t r = read(w->wake, &v, sizeof(v));
		(void)r;
	}
	thread_pause_running(&w->pause, false);
	return NULL;
}

static void poke(struct worker *w)
{
	uint64_t one = 1;
	cr_assert_eq(write(w->wake, &one, sizeof(one)), (ssize_t)sizeof(one));
}

static void start(struct worker *w)
{
	thread_pause_init(&w->pause);
	pthread_mutex_init(&w->work, NULL);
	w->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	cr_assert_geq(w->wake, 0);
	w->rounds = 0;
	w->stop = 0;
	w->spin = 0;
	w->working = 0;
	thread_pause_running(&w->pause, true);
	cr_assert_eq(pthread_create(&w->thread, NULL, worker_main, w), 0);
}

static void stop(struct worker *w)
{
	__atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
	poke(w);
	pthread_join(w->thread, NULL);
	close(w->wake);
}

static unsigned long rounds(struct worker *w)
{
	return __atomic_load_n(&w->rounds, __ATOMIC_ACQUIRE);
}

/* Pokes until the worker has gone past n rounds (it sleeps between them). */
static void wait_past(struct worker *w, unsigned long n)
{
	for (int i = 0; i < 100000 && rounds(w) <= n; i++) {
		poke(w);
		usleep(100);
	}
	cr_assert_gt(rounds(w), n, "the worker never went on");
}

/* Pokes the held worker for a while and says whether it ran meanwhile. */
static bool ran_while_held(struct worker *w)
{
	unsigned long before = rounds(w);
	for (int i = 0; i < 20; i++) {
		poke(w);
		usleep(1000);
	}
	return rounds(w) != before;
}

/* The kernel's word on the worker: 'S' while it sleeps in poll. */
static char task_state(struct worker *w)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat",
		 (int)__atomic_load_n(&w->tid, __ATOMIC_ACQUIRE));
	FILE *f = fopen(path, "r");
	if (!f)
		return '?';
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *paren = strrchr(buf, ')'); /* the name may hold spaces */
	return paren && paren[1] == ' ' ? paren[2] : '?';
}

/* Until the worker is asleep in poll with no poke left to wake it: it marks
 * the sleep just before poll, and a poke from wait_past may still be in
 * the eventfd (it would wake the worker at once, held or not). */
static void wait_asleep(struct worker *w)
{
	bool asleep = false;
	for (int i = 0; i < 100000 && !asleep; i++) {
		uint64_t v;
		ssize_t r = read(w->wake, &v, sizeof(v)); /* a poke not yet taken */
		(void)r;
		asleep = __atomic_load_n(&w->pause.asleep, __ATOMIC_ACQUIRE) && task_state(w) == 'S';
		if (!asleep)
			usleep(100);
	}
	cr_assert(asleep, "the worker never slept");
}

static bool parked(struct worker *w)
{
	pthread_mutex_lock(&w->pause.mu);
	bool p = w->pause.parked;
	pthread_mutex_unlock(&w->pause.mu);
	return p;
}

Test(thread_pause, a_thread_asleep_in_the_kernel_is_left_asleep_and_parks_as_it_wakes, .timeout = 10)
{
	struct worker w;
	start(&w);
	wait_past(&w, 0);
	wait_asleep(&w);
	unsigned long n = rounds(&w);
	thread_pause_hold(&w.pause);
	usleep(20000);
	cr_assert_not(parked(&w), "a hold woke the sleeping thread to park it");
	cr_assert(__atomic_load_n(&w.pause.asleep, __ATOMIC_ACQUIRE), "the thread left its sleep");
	cr_assert_not(ran_while_held(&w), "the held thread went on working when woken");
	cr_assert(parked(&w), "the thread woke while held and did not park");
	cr_assert_eq(pthread_mutex_trylock(&w.work), 0, "the parked thread holds its lock");
	pthread_mutex_unlock(&w.work);
	cr_assert_eq(rounds(&w), n);
	thread_pause_release(&w.pause);
	wait_past(&w, n);
	stop(&w);
}

struct holder {
	struct worker *w;
	int done; /* atomic */
};

static void *hold_main(void *arg)
{
	struct holder *h = arg;
	thread_pause_hold(&h->w->pause);
	__atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(thread_pause, a_working_thread_is_waited_for_until_it_parks_holding_nothing, .timeout = 10)
{
	struct worker w;
	start(&w);
	wait_past(&w, 0);
	wait_asleep(&w);
	__atomic_store_n(&w.spin, 1, __ATOMIC_RELEASE);
	poke(&w);
	for (int i = 0; i < 100000 && !__atomic_load_n(&w.working, __ATOMIC_ACQUIRE); i++)
		usleep(100);
	cr_assert(__atomic_load_n(&w.working, __ATOMIC_ACQUIRE), "the worker never started work");
	struct holder h = {.w = &w};
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, hold_main, &h), 0);
	usleep(20000);
	cr_assert_not(__atomic_load_n(&h.done, __ATOMIC_ACQUIRE),
		      "the hold returned while the thread was working");
	__atomic_store_n(&w.spin, 0, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	/* The hold may return in the instant the thread marks itself about to
	 * sleep, before it sees the hold and parks instead: it holds nothing
	 * from then on, and parks at once. */
	for (int i = 0; i < 100000 && !parked(&w); i++)
		usleep(100);
	cr_assert(parked(&w), "the held thread never parked");
	cr_assert_eq(pthread_mutex_trylock(&w.work), 0, "the parked thread holds its lock");
	pthread_mutex_unlock(&w.work);
	unsigned long n = rounds(&w);
	cr_assert_not(ran_while_held(&w), "the held thread went on working");
	thread_pause_release(&w.pause);
	wait_past(&w, n);
	stop(&w);
}

Test(thread_pause, holds_nest_the_thread_goes_on_after_the_last_release, .timeout = 10)
{
	struct worker w;
	start(&w);
	wait_past(&w, 0);
	thread_pause_hold(&w.pause);
	thread_pause_hold(&w.pause);
	thread_pause_release(&w.pause);
	cr_assert_not(ran_while_held(&w), "one of two holds released let the thread go");
	unsigned long n = rounds(&w);
	thread_pause_release(&w.pause);
	wait_past(&w, n);
	stop(&w);
}

Test(thread_pause, a_thread_that_does_not_run_is_not_waited_for, .timeout = 10)
{
	struct thread_pause p;
	thread_pause_init(&p);
	thread_pause_hold(&p); /* never started */
	thread_pause_release(&p);

	struct worker w;
	start(&w);
	wait_past(&w, 0);
	stop(&w); /* gone: marked not running on its way out */
	thread_pause_hold(&w.pause);
	thread_pause_release(&w.pause);
}
