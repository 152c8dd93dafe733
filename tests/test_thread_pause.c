/* thread_pause: a held thread is parked where it holds nothing, holds nest,
 * and a thread that does not run is never waited for. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
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
	pthread_t thread;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		thread_pause_point(&w->pause);
		pthread_mutex_lock(&w->work);
		__atomic_add_fetch(&w->rounds, 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&w->work);
		struct pollfd p = {.fd = w->wake, .events = POLLIN};
		poll(&p, 1, -1);
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

Test(thread_pause, a_held_thread_sleeping_in_the_kernel_is_woken_and_parked_holding_nothing)
{
	struct worker w;
	start(&w);
	wait_past(&w, 0);
	thread_pause_hold(&w.pause, w.wake);
	cr_assert(w.pause.parked, "hold returned before the thread was parked");
	cr_assert_eq(pthread_mutex_trylock(&w.work), 0, "the parked thread holds its lock");
	pthread_mutex_unlock(&w.work);
	cr_assert_not(ran_while_held(&w), "the held thread went on working");
	unsigned long n = rounds(&w);
	thread_pause_release(&w.pause);
	wait_past(&w, n);
	stop(&w);
}

Test(thread_pause, holds_nest_the_thread_goes_on_after_the_last_release)
{
	struct worker w;
	start(&w);
	wait_past(&w, 0);
	thread_pause_hold(&w.pause, w.wake);
	thread_pause_hold(&w.pause, w.wake);
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
	thread_pause_hold(&p, -1); /* never started */
	thread_pause_release(&p);

	struct worker w;
	start(&w);
	wait_past(&w, 0);
	stop(&w); /* gone: marked not running on its way out */
	thread_pause_hold(&w.pause, -1);
	thread_pause_release(&w.pause);
}
