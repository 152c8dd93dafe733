/*
 * A place where a background thread stops on request. fork asks ferry's
 * threads to stop first, where they hold no lock and no allocation is under
 * way, so the child's copy of memory is never caught half-updated by a
 * thread the child does not have. An allocator that is not fork-safe (the
 * one AddressSanitizer brings in GCC 12) otherwise deadlocks the child at
 * its first malloc when one of ferry's threads held its lock at the fork.
 *
 * A thread asleep in the kernel holds nothing either, so a hold does not
 * wake it: it marks its sleeps (thread_pause_sleep_begin/end) and parks as
 * it wakes if it is held by then. A fork-per-connection server's fork would
 * otherwise wake each of ferry's threads twice (to park, then to go on).
 */
#ifndef FERRY_TRANSPORT_THREAD_PAUSE_H
#define FERRY_TRANSPORT_THREAD_PAUSE_H

#include <pthread.h>
#include <stdbool.h>

struct thread_pause {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned holds; /* how many hold the thread (two threads may fork at once) */
	bool parked;    /* the thread is at its pause point */
	bool running;   /* the thread exists: nobody waits for one that does not */
	int asleep;     /* atomic: between thread_pause_sleep_begin and _end */
};

void thread_pause_init(struct thread_pause *p);
/* The thread starts or stops running (a thread that is gone is held already). */
void thread_pause_running(struct thread_pause *p, bool running);
/* On the thread, holding nothing: stays here while it is held. */
void thread_pause_point(struct thread_pause *p);
/* On the thread, holding nothing, right before and right after a sleep in
 * the kernel (poll, epoll_wait): a hold taken before the sleep parks the
 * thread here instead, one taken during it when the thread wakes. */
void thread_pause_sleep_begin(struct thread_pause *p);
void thread_pause_sleep_end(struct thread_pause *p);
/* Holds the thread: returns once it is parked or asleep in the kernel (at
 * once when it does not run). */
void thread_pause_hold(struct thread_pause *p);
/* Lets it go on once every hold is released. */
void thread_pause_release(struct thread_pause *p);

#endif
