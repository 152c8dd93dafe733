/*
 * Sleeping and waking: each thread has one waiter (an eventfd) that it
 * links onto the files it waits for; whoever changes a file's readiness
 * wakes the linked waiters. wait_block() is the one place a thread sleeps in
 * the kernel: on its waiter, on the nic's notification fd (so a packet wakes
 * it without a hop through the progress thread) and on any kernel fds the
 * caller also waits for.
 */
#ifndef FERRY_PRELOAD_WAIT_H
#define FERRY_PRELOAD_WAIT_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

struct ffile;

/* The nic's notification fd as one epoll instance holds it (see
 * wait_nic_keep). Changed under the instance's owner's lock; kept is also
 * read without it, as a hint. */
struct wait_nic_reg {
	int fd;       /* -1: not in the instance */
	unsigned gen; /* wait_nic_gen() when it was added */
	bool kept;    /* atomic: stays between sleeps */
};

struct waiter {
	int efd;
	int signaled; /* atomic: efd holds a count */
	int epfd;     /* efd plus the nic's notification fd (exclusive), or -1 */
	struct wait_nic_reg nic;
};

struct wait_node {
	struct waiter *waiter;
	struct wait_node *next, *prev;
};

/* The calling thread's waiter, created on first use; NULL if no eventfd
 * could be made (the caller then polls with short sleeps). */
struct waiter *wait_self(void);
/* Wakes w; cheap when it is already signalled. Any thread, any lock. */
void wait_wake(struct waiter *w);
/* Clears a signal after waking: one read on the eventfd if signalled or if
 * the sleep saw it readable (ready). */
void wait_consume(struct waiter *w, bool ready);

/* In a fork child: the thread's eventfd is shared with the parent's
 * thread, so it is dropped and a new one made on next use. */
void wait_fork_child(void);

/*
 * Adding the nic's notification fd to an epoll instance before each sleep
 * and removing it after costs two system calls (1.5 us here) per sleep, as
 * much as the sleep itself. A few instances (WAIT_NIC_KEPT_MAX in the
 * process) keep it between sleeps instead: every packet runs the wake-up
 * callback of each instance that holds it, asleep or not, so their number
 * is bounded. wait_nic_keep() takes one of those places (false: none left,
 * add and remove per sleep as before); wait_nic_unkeep() gives it back.
 */
bool wait_nic_keep(void);
void wait_nic_unkeep(void);
/* Puts nfd in epfd under tag, exclusive and edge-triggered, kept between
 * sleeps when may_keep and a place is free; a registration of another fd or
 * of an older generation is taken out first. Nothing when r holds it
 * already. */
void wait_nic_add(int epfd, struct wait_nic_reg *r, int nfd, void *tag, bool may_keep);
/* Takes r's fd out of epfd (harmlessly gone already when the socket behind
 * the number was replaced) and gives back its place. */
void wait_nic_remove(int epfd, struct wait_nic_reg *r);
/* Which socket the notification fd number stands for: a registration made
 * under another generation is on a socket that has since been replaced
 * behind the same number (the nic widened, dup3). */
unsigned wait_nic_gen(void);
void wait_nic_replaced(void);

void wait_link(struct ffile *f, struct wait_node *n, struct waiter *w);
void wait_unlink(struct ffile *f, struct wait_node *n);

/*
 * How waits drive the transport. ferry.c installs these once the process's
 * endpoint exists; before that (and in unit tests) waits only sleep.
 * run: one pass of the event loop if no other thread is running it.
 * arm: prepares to sleep; returns the notification fd to sleep on, -1 for
 *      none, -EAGAIN when packets are already waiting (do not sleep), or
 *      -EBUSY while another thread runs the loop (do not sleep yet: only a
 *      thread that armed may count on the nic's fd to wake it, see
 *      ep_nic_watch).
 */
struct wait_progress_ops {
	unsigned (*run)(void); /* packets received, 0 also when another thread runs it */
	/* The fd to sleep on, -1 for none, -EBUSY while another thread holds
	 * the loop, or -EAGAIN: packets were waiting and arm ran the loop for
	 * them (do not sleep; look for their events). */
	int (*arm)(void);
	void (*flush)(void); /* sends what the application queued */
	/* Optional: the nic's last look found it empty (rpc_rx_drained), and
	 * a wake-up from the nic's fd was taken (rpc_rx_notified). */
	bool (*rx_drained)(void);
	void (*rx_notified)(void);
};
void wait_set_progress(const struct wait_progress_ops *ops, unsigned spin_us);
unsigned wait_progress_run(void);
/* Whether a look at the nic before sleeping on its fd can be skipped:
 * its last look found nothing left, and the fd wakes for what came since. */
bool wait_rx_drained(void);
/* Whether a non-blocking receive that found nothing may leave the nic
 * unread (see wait.c). */
bool wait_miss_skips_look(void);
/* Called by whoever takes a wake-up from the nic's fd, before running the
 * loop for it: its packets stay queued if that run finds the loop busy. */
void wait_rx_notified(void);
/* Around an application thread's sleep in the kernel with the nic's fd
 * armed and watched: a packet for this process wakes that thread, which runs
 * the loop, so the progress thread need not look in on its behalf. */
void wait_nic_sleep_begin(void);
void wait_nic_sleep_end(void);
bool wait_nic_sleeping(void);
/* Called as a thread starts to wait: its queued writes go out now. */
void wait_flush(void);
/* One turn of a spin: the event loop once, then, if it found nothing, the
 * CPU to anyone waiting for it. A spinner that kept its CPU would starve a
 * peer process that shares it (a client and server on one core) until the
 * spin ran out; one that just got packets has work and no peer to wait for. */
void wait_spin_once(void);
/* ops->arm, or -1 when there is no transport; after some -EBUSY in a row
 * from this thread, -1 (sleep without the nic's fd, see wait.c). */
int wait_arm(void);
unsigned wait_spin_us(void);
/* Whether a spin that found its event only after one of its yields let
 * another thread run counts as spent (as one that ran out does). Over a
 * nic whose every look is a system call and whose packets wake a sleeper
 * at no cost to the sender (udp), such a spin only took the others' CPU;
 * over shared memory (softib, ib) a look is a read and a sleeper costs its
 * peer a wake-up call, so the yields were the cheaper sleep (nginx with two
 * workers over softib: 4% fewer requests when they counted as spent). */
void wait_set_ceded_spins_spent(bool spent);
/* How a spin of wait_spin_us() > 0 ended: found what it waited for, or ran
 * out (the thread's next waits may skip spinning, see wait.c). */
void wait_spin_outcome(bool found);
/* This thread's spin now, in us (0 before its first): FERRY_SPIN_US, or
 * more after spins that ran out just short of their event (wait.c). */
unsigned wait_spin_current_us(void);
/* Whether a spin whose turn-th turn just ended is past end (clock_now_ns):
 * the clock is read only every WAIT_SPIN_CLOCK_TURNS turns, since a read
 * of it costs about as much as a turn's look at the nic. */
#define WAIT_SPIN_CLOCK_TURNS 8
static inline bool wait_spin_clock_turn(unsigned turn)
{
	return turn % WAIT_SPIN_CLOCK_TURNS == WAIT_SPIN_CLOCK_TURNS - 1;
}
bool wait_spin_over(unsigned turn, uint64_t end);

/*
 * Sleeps until w is woken, a packet may be waiting, one of kfds[0..nk) has
 * an event, the timeout (NULL: none) passes or a signal arrives; sigmask as
 * for ppoll. kfds must have room for nk + 2 entries (the waiter and the
 * notification fd go after the caller's). Returns the number of the
 * caller's kfds with revents, 0, or -EINTR / -errno.
 */
int wait_block(struct waiter *w, struct pollfd *kfds, unsigned nk, const struct timespec *timeout,
	       const sigset_t *sigmask);

/*
 * Whether a blocking socket call interrupted by a signal should resume, as
 * the kernel resumes one under SA_RESTART. The handler that ran says, if
 * it was installed through ferry (preload/signal.c); otherwise (ferry
 * sleeps in ppoll, which the kernel never restarts and which does not say
 * which signal came) yes when every caught signal's handler has SA_RESTART.
 */
bool wait_signals_restart(void);

/*
 * A blocking call spins before it sleeps, and a signal handled meanwhile
 * ends no kernel sleep. So the application's handlers note each run on the
 * thread they interrupted (wait_signal_noted, async-signal-safe); a call
 * forgets earlier runs as it begins (wait_signal_begin) and fails with
 * EINTR where wait_signal_hit says a handler ran since, while it spins and
 * before each sleep, as the kernel's call would have failed in its sleep.
 */
void wait_signal_begin(void);
bool wait_signal_hit(void);
void wait_signal_noted(bool restart);

/* Deadlines in CLOCK_MONOTONIC nanoseconds; UINT64_MAX is "never". */
uint64_t wait_deadline_ms(int timeout_ms);
uint64_t wait_deadline_ts(const struct timespec *ts);
/* What is left until deadline, as a timespec (NULL when it is never). */
const struct timespec *wait_remaining(uint64_t deadline, struct timespec *buf);

#endif
