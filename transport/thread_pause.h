/*
 * A place where a background thread stops on request. fork asks ferry's
 * threads to stop first, where they hold no lock and no allocation is under
 * way, so the child's copy of memory is never caught half-updated by a
 * thread the child does not have. An allocator that is not fork-safe (the
 * one AddressSanitizer brings in GCC 12) otherwise deadlocks the child at
 * its first malloc when one of ferry's threads held its lock at the fork.
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
};

void thread_pause_init(struct thread_pause *p);
/* The thread starts or stops running (a thread that is gone is held already). */
void thread_pause_running(struct thread_pause *p, bool running);
/* On the thread, holding nothing: stays here while it is held. */
void thread_pause_point(struct thread_pause *p);
/* Holds the thread: returns once it is parked (at once when it does not run).
 * wake_fd, an eventfd the thread sleeps on, is written to end its sleep. */
void thread_pause_hold(struct thread_pause *p, int wake_fd);
/* Lets it go on once every hold is released. */
void thread_pause_release(struct thread_pause *p);

#endif
