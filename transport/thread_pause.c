/* A place where a background thread stops on request: see thread_pause.h. */
#include "autoconfig.h"

#include "transport/thread_pause.h"

#include <stdint.h>

#include "transport/sys.h"

void thread_pause_init(struct thread_pause *p)
{
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->holds = 0;
	p->parked = false;
	p->running = false;
}

void thread_pause_running(struct thread_pause *p, bool running)
{
	pthread_mutex_lock(&p->mu);
	p->running = running;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

void thread_pause_point(struct thread_pause *p)
{
	if (!__atomic_load_n(&p->holds, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&p->mu);
	p->parked = true;
	pthread_cond_broadcast(&p->cv);
	while (p->holds)
		pthread_cond_wait(&p->cv, &p->mu);
	p->parked = false;
	pthread_mutex_unlock(&p->mu);
}

void thread_pause_hold(struct thread_pause *p, int wake_fd)
{
	pthread_mutex_lock(&p->mu);
	__atomic_store_n(&p->holds, p->holds + 1, __ATOMIC_RELEASE);
	if (wake_fd >= 0 && p->running) {
		uint64_t one = 1;
		ssize_t r = sys()->write(wake_fd, &one, sizeof(one));
		(void)r; /* only fails when the counter is huge: readable anyway */
	}
	while (p->running && !p->parked)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

void thread_pause_release(struct thread_pause *p)
{
	pthread_mutex_lock(&p->mu);
	if (p->holds)
		__atomic_store_n(&p->holds, p->holds - 1, __ATOMIC_RELEASE);
	if (!p->holds)
		pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}
