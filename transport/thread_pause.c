/* A place where a background thread stops on request: see thread_pause.h. */
#include "autoconfig.h"

#include "transport/thread_pause.h"

void thread_pause_init(struct thread_pause *p)
{
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->holds = 0;
	p->parked = false;
	p->running = false;
	p->asleep = 0;
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

/* asleep and holds are a Dekker pair (both sequentially consistent): either
 * the holder sees the thread asleep, and the thread then parks on waking,
 * or the thread sees the hold before it sleeps and parks instead. */
void thread_pause_sleep_begin(struct thread_pause *p)
{
	for (;;) {
		__atomic_store_n(&p->asleep, 1, __ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&p->holds, __ATOMIC_SEQ_CST))
			return;
		__atomic_store_n(&p->asleep, 0, __ATOMIC_SEQ_CST);
		thread_pause_point(p);
	}
}

void thread_pause_sleep_end(struct thread_pause *p)
{
	__atomic_store_n(&p->asleep, 0, __ATOMIC_SEQ_CST);
	thread_pause_point(p);
}

void thread_pause_hold(struct thread_pause *p)
{
	pthread_mutex_lock(&p->mu);
	__atomic_store_n(&p->holds, p->holds + 1, __ATOMIC_SEQ_CST);
	while (p->running && !p->parked && !__atomic_load_n(&p->asleep, __ATOMIC_SEQ_CST))
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
