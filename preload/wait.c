/* Per-thread waiters and the one kernel sleep every blocking call shares. */
#include "autoconfig.h"

#include "preload/wait.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "preload/fdtable.h"
#include "preload/signal.h"
#include "transport/clock.h"
#include "transport/sys.h"

static __thread struct waiter *wait_tls __attribute__((tls_model("initial-exec")));
static pthread_key_t wait_key;
static pthread_once_t wait_key_once = PTHREAD_ONCE_INIT;

static const struct wait_progress_ops *wait_ops;
static unsigned wait_spin;

static void wait_destroy(void *p)
{
	struct waiter *w = p;
	if (w->nic.kept)
		wait_nic_unkeep();
	sys()->close(w->efd);
	if (w->epfd >= 0)
		sys()->close(w->epfd);
	free(w);
}

static char wait_efd_tag, wait_notify_tag;

#define WAIT_NIC_KEPT_MAX 8u
static unsigned wait_nic_kept; /* atomic */
static unsigned wait_nic_generation; /* atomic */

bool wait_nic_keep(void)
{
	unsigned n = __atomic_load_n(&wait_nic_kept, __ATOMIC_RELAXED);
	while (n < WAIT_NIC_KEPT_MAX)
		if (__atomic_compare_exchange_n(&wait_nic_kept, &n, n + 1, false, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			return true;
	return false;
}

void wait_nic_unkeep(void)
{
	__atomic_sub_fetch(&wait_nic_kept, 1, __ATOMIC_ACQ_REL);
}

unsigned wait_nic_gen(void)
{
	return __atomic_load_n(&wait_nic_generation, __ATOMIC_ACQUIRE);
}

void wait_nic_replaced(void)
{
	__atomic_add_fetch(&wait_nic_generation, 1, __ATOMIC_ACQ_REL);
}

void wait_nic_remove(int epfd, struct wait_nic_reg *r)
{
	sys()->epoll_ctl(epfd, EPOLL_CTL_DEL, r->fd, NULL);
	r->fd = -1;
	if (__atomic_exchange_n(&r->kept, false, __ATOMIC_RELAXED))
		wait_nic_unkeep();
}

void wait_nic_add(int epfd, struct wait_nic_reg *r, int nfd, void *tag, bool may_keep)
{
	unsigned gen = wait_nic_gen();
	if (r->fd >= 0 && (r->fd != nfd || r->gen != gen))
		wait_nic_remove(epfd, r);
	if (r->fd >= 0)
		return;
	bool keep = may_keep && wait_nic_keep();
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET | EPOLLEXCLUSIVE, .data.ptr = tag};
	if (sys()->epoll_ctl(epfd, EPOLL_CTL_ADD, nfd, &ev) == 0) {
		r->fd = nfd;
		r->gen = gen;
		__atomic_store_n(&r->kept, keep, __ATOMIC_RELAXED);
	} else if (keep) {
		wait_nic_unkeep();
	}
}

/*
 * The thread's own epoll: its waiter and the nic's notification fd nfd
 * (exclusive, so one packet wakes one sleeping thread), or none when nfd is
 * -1. Edge-triggered, yet nothing is missed: adding a readable fd makes it
 * ready at once, and a kept one that fired while the thread was awake ends
 * its next sleep only if the packet is still there (epoll asks the socket
 * again before it reports).
 */
static int wait_epoll(struct waiter *w, int nfd)
{
	const struct sys_fns *c = sys();
	if (w->epfd < 0) {
		w->epfd = c->epoll_create1(EPOLL_CLOEXEC);
		if (w->epfd < 0)
			return -1;
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &wait_efd_tag};
		if (c->epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->efd, &ev) != 0) {
			c->close(w->epfd);
			w->epfd = -1;
			return -1;
		}
	}
	if (nfd >= 0)
		wait_nic_add(w->epfd, &w->nic, nfd, &wait_notify_tag, true);
	else if (w->nic.fd >= 0)
		wait_nic_remove(w->epfd, &w->nic);
	return w->epfd;
}

static void wait_epoll_done(struct waiter *w)
{
	if (w->nic.fd >= 0 && !w->nic.kept)
		wait_nic_remove(w->epfd, &w->nic);
}

static void wait_key_init(void)
{
	pthread_key_create(&wait_key, wait_destroy);
}

struct waiter *wait_self(void)
{
	if (wait_tls)
		return wait_tls;
	pthread_once(&wait_key_once, wait_key_init);
	struct waiter *w = malloc(sizeof(*w));
	if (!w)
		return NULL;
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->efd < 0) {
		free(w);
		return NULL;
	}
	w->signaled = 0;
	w->epfd = -1;
	w->nic = (struct wait_nic_reg){.fd = -1};
	wait_tls = w;
	pthread_setspecific(wait_key, w);
	return w;
}

/* Application threads asleep on the nic's fd: see wait_nic_sleep_begin. */
static int wait_nic_sleepers; /* atomic */

void wait_fork_child(void)
{
	/* The parent's threads, and their registrations, stayed behind; the
	 * nic is replaced by one of the child's own. */
	__atomic_store_n(&wait_nic_kept, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&wait_nic_sleepers, 0, __ATOMIC_RELAXED);
	wait_nic_replaced();
	struct waiter *w = wait_tls;
	if (!w)
		return;
	wait_tls = NULL;
	pthread_setspecific(wait_key, NULL);
	sys()->close(w->efd);
	if (w->epfd >= 0)
		sys()->close(w->epfd);
	free(w);
}

void wait_wake(struct waiter *w)
{
	/* A thread that wakes itself (running the loop inside wait_block) is
	 * awake already, and every waiter looks again after wait_block. */
	if (w == wait_tls)
		return;
	if (__atomic_exchange_n(&w->signaled, 1, __ATOMIC_ACQ_REL))
		return;
	uint64_t one = 1;
	ssize_t r = sys()->write(w->efd, &one, sizeof(one));
	(void)r;
}

void wait_consume(struct waiter *w, bool ready)
{
	/* A count written after its waker's flag was consumed (the waiter woke
	 * for another reason between the two) is drained when seen: left
	 * there, it would end every later sleep at once. */
	if (!ready && !__atomic_load_n(&w->signaled, __ATOMIC_ACQUIRE))
		return;
	uint64_t v;
	ssize_t r = sys()->read(w->efd, &v, sizeof(v));
	(void)r;
	__atomic_store_n(&w->signaled, 0, __ATOMIC_RELEASE);
}

void wait_link(struct ffile *f, struct wait_node *n, struct waiter *w)
{
	n->waiter = w;
	n->prev = NULL;
	pthread_mutex_lock(&f->wlock);
	n->next = f->waiters;
	if (n->next)
		n->next->prev = n;
	f->waiters = n;
	pthread_mutex_unlock(&f->wlock);
}

void wait_unlink(struct ffile *f, struct wait_node *n)
{
	pthread_mutex_lock(&f->wlock);
	if (n->prev)
		n->prev->next = n->next;
	else
		f->waiters = n->next;
	if (n->next)
		n->next->prev = n->prev;
	pthread_mutex_unlock(&f->wlock);
}

void wait_set_progress(const struct wait_progress_ops *ops, unsigned spin_us)
{
	wait_spin = spin_us;
	__atomic_store_n(&wait_ops, ops, __ATOMIC_RELEASE);
}

void wait_nic_sleep_begin(void)
{
	__atomic_add_fetch(&wait_nic_sleepers, 1, __ATOMIC_RELEASE);
}

void wait_nic_sleep_end(void)
{
	__atomic_sub_fetch(&wait_nic_sleepers, 1, __ATOMIC_RELEASE);
}

bool wait_nic_sleeping(void)
{
	return __atomic_load_n(&wait_nic_sleepers, __ATOMIC_ACQUIRE) > 0;
}

unsigned wait_progress_run(void)
{
	const struct wait_progress_ops *ops = __atomic_load_n(&wait_ops, __ATOMIC_ACQUIRE);
	return ops ? ops->run() : 0;
}

bool wait_rx_drained(void)
{
	const struct wait_progress_ops *ops = __atomic_load_n(&wait_ops, __ATOMIC_ACQUIRE);
	return ops && ops->rx_drained && ops->rx_drained();
}

/*
 * A non-blocking receive that finds its stream empty leaves the nic
 * unread when the last look found it empty and no wake-up came since: an
 * event loop waits next, and its wait looks or sleeps on the nic, so the
 * look would be a system call that finds nothing (pgbench -S -c 8 over
 * udp: one a query; the median of eight runs 7% more transactions without
 * it). A thread
 * that tries again without waiting in between (a loop of receives) looks
 * each time after its first: nobody else may be about to.
 */
static __thread bool wait_miss_unlooked __attribute__((tls_model("initial-exec")));

bool wait_miss_skips_look(void)
{
	if (wait_miss_unlooked || !wait_rx_drained())
		return false;
	wait_miss_unlooked = true;
	return true;
}

void wait_rx_notified(void)
{
	const struct wait_progress_ops *ops = __atomic_load_n(&wait_ops, __ATOMIC_ACQUIRE);
	if (ops && ops->rx_notified)
		ops->rx_notified();
}

void wait_flush(void)
{
	wait_miss_unlooked = false; /* every wait begins here */
	const struct wait_progress_ops *ops = __atomic_load_n(&wait_ops, __ATOMIC_ACQUIRE);
	if (ops && ops->flush)
		ops->flush();
}

/* This thread's spin under way gave its CPU to another thread at a yield
 * (see wait_spin_outcome). */
static __thread bool wait_spin_ceded __attribute__((tls_model("initial-exec")));
static bool wait_ceded_spent; /* atomic */

void wait_set_ceded_spins_spent(bool spent)
{
	__atomic_store_n(&wait_ceded_spent, spent, __ATOMIC_RELAXED);
}

/* A yield that returns later than this ran someone else meanwhile: a
 * yield that finds nobody to run returns within a microsecond or two. */
#define WAIT_YIELD_CEDED_NS 10000u

/*
 * A spin yields every so many empty passes, so a thread that shares the CPU
 * (the application's own, or the peer's spin) runs. A yield that found
 * nobody to run was a system call for nothing, and one in the middle of an
 * arrival delays it. After WAIT_YIELD_QUIET such yields in a row the
 * interval doubles with each further one, up to WAIT_YIELD_EVERY_MAX passes;
 * it goes back to WAIT_YIELD_EVERY_MIN when a yield lets another thread run
 * or a spin runs out. (Beside a busy thread, CFS runs it at every second or
 * third yield only, so a few quiet ones in a row do not mean the CPU is
 * ours.) Whatever the interval, a spin yields once WAIT_YIELD_GAP_NS have
 * passed since the last yield: a CPU that became shared after a quiet spell
 * is noticed within a spin. sockperf over softib, both ends spinning: 2.5
 * yields per round trip before, 0.02 after.
 *
 * Only where a look is a read of memory (softib, ib). Over udp each look is
 * a system call already, and pgbench -S -c 8 (eight backends on two cores)
 * lost 7-12% of its transactions with fewer yields.
 */
#define WAIT_YIELD_EVERY_MIN 16u
#define WAIT_YIELD_EVERY_MAX 1024u
#define WAIT_YIELD_QUIET 4u
#define WAIT_YIELD_GAP_NS 8000u

static __thread unsigned wait_yield_every __attribute__((tls_model("initial-exec")));
static __thread unsigned wait_yield_quiet __attribute__((tls_model("initial-exec")));
static __thread uint64_t wait_yield_last __attribute__((tls_model("initial-exec")));

static void wait_yield_reset(void)
{
	wait_yield_every = WAIT_YIELD_EVERY_MIN;
	wait_yield_quiet = 0;
}

void wait_spin_once(void)
{
	static __thread unsigned idle __attribute__((tls_model("initial-exec")));
	static __thread bool fresh __attribute__((tls_model("initial-exec")));
	if (wait_progress_run() != 0) {
		idle = 0;
		fresh = true;
		return;
	}
	if (wait_yield_every < WAIT_YIELD_EVERY_MIN)
		wait_yield_reset();
	/* The clock only every WAIT_YIELD_EVERY_MIN passes, as before; the gap
	 * counts from the yield before or from this run of empty passes,
	 * whichever is later, so a spin shorter than it never yields. */
	if (++idle < wait_yield_every) {
		if (idle % WAIT_YIELD_EVERY_MIN != 0)
			return;
		uint64_t now = clock_now_ns();
		if (now - wait_yield_last < WAIT_YIELD_GAP_NS)
			return;
		if (fresh) {
			fresh = false;
			wait_yield_last = now;
			return;
		}
	}
	idle = 0;
	uint64_t t = clock_now_ns();
	sched_yield();
	wait_yield_last = clock_now_ns();
	if (wait_yield_last - t > WAIT_YIELD_CEDED_NS) {
		wait_spin_ceded = true;
		wait_yield_reset();
	} else if (++wait_yield_quiet >= WAIT_YIELD_QUIET && wait_yield_every < WAIT_YIELD_EVERY_MAX &&
		   !__atomic_load_n(&wait_ceded_spent, __ATOMIC_RELAXED)) {
		wait_yield_every *= 2;
	}
}

bool wait_spin_over(unsigned turn, uint64_t end)
{
	return wait_spin_clock_turn(turn) && clock_now_ns() >= end;
}

/*
 * A thread that finds the loop busy looks again, yielding in between (the
 * holder's pass is short), but only so many times in a row: then it sleeps
 * without the nic's fd, leaving the packets to the holder (and to the
 * progress thread's tick), so a holder that does not let go (the exit
 * drain, a fork, a stopped thread) keeps nobody off its kernel fds and its
 * signals, nor spinning.
 */
#define WAIT_BUSY_TURNS 64
static __thread unsigned wait_busy_turns __attribute__((tls_model("initial-exec")));

static int wait_arm_ops(const struct wait_progress_ops *ops)
{
	int rc = ops->arm();
	if (rc != -EBUSY) {
		wait_busy_turns = 0;
		return rc;
	}
	if (++wait_busy_turns < WAIT_BUSY_TURNS)
		return -EBUSY;
	wait_busy_turns = 0;
	return -1;
}

int wait_arm(void)
{
	const struct wait_progress_ops *ops = __atomic_load_n(&wait_ops, __ATOMIC_ACQUIRE);
	return ops ? wait_arm_ops(ops) : -1;
}

/*
 * A spin that runs out found nothing a sleep would not have: after
 * WAIT_SPIN_MISSES of them in a row the thread sleeps at once, trying a
 * spin again every WAIT_SPIN_PROBE-th wait, until one finds its event. A
 * peer that answers within the spin keeps it; one that is slow (or waits
 * for the CPU this thread would spin on) stops it. So does a spin that
 * found its event only after one of its yields let another thread run,
 * where that counts (wait_set_ceded_spins_spent): the CPU is short, and
 * the spin was a sleep that cost the others its turns (pgbench -S -c 8
 * over udp, eight backends on two cores: 6-9% more transactions with no
 * spin than with spins that found their query).
 */
#define WAIT_SPIN_MISSES 4
#define WAIT_SPIN_PROBE 16
static __thread unsigned wait_spin_misses __attribute__((tls_model("initial-exec")));
static __thread unsigned wait_spin_skips __attribute__((tls_model("initial-exec")));

/*
 * A thread's spin is FERRY_SPIN_US long, or longer: one that ran out on
 * its CPU alone, and whose event came before as long again had passed,
 * doubles, up to WAIT_SPIN_GROW_US; one that ran out and then slept four
 * times as long halves again, and one that ran out on a CPU others wanted
 * (wait_cpu_contended) goes back to FERRY_SPIN_US. A peer that answers in
 * 50 to 500 us (a postgres query) then finds its client still spinning
 * where the CPU is there for it (pgbench -S -c 1 over udp: from 8,000 to
 * 11,000 transactions/s), and a busy host keeps the short spin.
 */
#define WAIT_SPIN_GROW_US 800u
static __thread unsigned wait_spin_cur __attribute__((tls_model("initial-exec")));
static __thread uint64_t wait_ran_out_ns __attribute__((tls_model("initial-exec")));

static unsigned spin_max(void)
{
	return wait_spin > WAIT_SPIN_GROW_US ? wait_spin : WAIT_SPIN_GROW_US;
}

unsigned wait_spin_us(void)
{
	if (!wait_spin || !__atomic_load_n(&wait_ops, __ATOMIC_ACQUIRE))
		return 0;
	if (wait_spin_misses >= WAIT_SPIN_MISSES && ++wait_spin_skips % WAIT_SPIN_PROBE != 0)
		return 0;
	wait_spin_ceded = false;
	if (wait_spin_cur < wait_spin || wait_spin_cur > spin_max())
		wait_spin_cur = wait_spin;
	return wait_spin_cur;
}

/*
 * Whether this thread's CPU is wanted by others: its spin ceded the CPU,
 * or the kernel took it away (an involuntary switch) since the last spin
 * that ran out. Read only when a spin ran out, before a sleep anyway.
 */
static __thread long wait_nivcsw_seen __attribute__((tls_model("initial-exec")));

static bool wait_cpu_contended(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_THREAD, &ru) != 0)
		return true;
	bool taken = ru.ru_nivcsw != wait_nivcsw_seen;
	wait_nivcsw_seen = ru.ru_nivcsw;
	return taken || wait_spin_ceded;
}

/* At the end of a sleep that followed a spin that ran out. */
static void wait_spin_adapt(void)
{
	if (!wait_ran_out_ns)
		return;
	uint64_t slept = clock_now_ns() - wait_ran_out_ns;
	uint64_t spun = (uint64_t)wait_spin_cur * 1000u;
	wait_ran_out_ns = 0;
	if (slept <= spun)
		wait_spin_cur = wait_spin_cur * 2 < spin_max() ? wait_spin_cur * 2 : spin_max();
	else if (slept > 4 * spun)
		wait_spin_cur = wait_spin_cur / 2 > wait_spin ? wait_spin_cur / 2 : wait_spin;
}

unsigned wait_spin_current_us(void)
{
	return wait_spin_cur;
}

void wait_spin_outcome(bool found)
{
	struct waiter *w = wait_tls;
	/* A thread that spins does not sleep: a kept nic's fd would only put
	 * a wake-up callback into every packet's path. The next sleep adds it
	 * again. */
	if (found && w && w->nic.kept)
		wait_nic_remove(w->epfd, &w->nic);
	if (!found)
		wait_yield_reset(); /* a spin that ran out: the CPU may be shared now */
	wait_ran_out_ns = 0;
	if (!found && wait_cpu_contended())
		wait_spin_cur = wait_spin;
	else if (!found)
		wait_ran_out_ns = clock_now_ns();
	if (found && !(wait_spin_ceded && __atomic_load_n(&wait_ceded_spent, __ATOMIC_RELAXED)))
		wait_spin_misses = 0;
	else if (wait_spin_misses < WAIT_SPIN_MISSES)
		wait_spin_misses++;
}

static int wait_block_once(struct waiter *w, struct pollfd *kfds, unsigned nk,
			   const struct timespec *timeout, const sigset_t *sigmask)
{
	const struct wait_progress_ops *ops = __atomic_load_n(&wait_ops, __ATOMIC_ACQUIRE);
	int nfd = -1;
	if (ops) {
		nfd = wait_arm_ops(ops);
		if (nfd == -EAGAIN)
			return 0; /* the arm ran the loop for what was waiting */
		if (nfd == -EBUSY) {
			sched_yield(); /* see ep_wait */
			return 0;
		}
	}
	if (nk == 0 && w && wait_epoll(w, nfd) >= 0 && (nfd < 0 || w->nic.fd == nfd)) {
		struct epoll_event ev[2];
		int ms = -1;
		if (timeout) {
			uint64_t t = (uint64_t)timeout->tv_sec * 1000u +
				     ((uint64_t)timeout->tv_nsec + 999999u) / 1000000u;
			ms = t > INT_MAX ? INT_MAX : (int)t;
		}
		if (nfd >= 0)
			wait_nic_sleep_begin();
		int k = sys()->epoll_pwait(w->epfd, ev, 2, ms, sigmask);
		int err = errno;
		if (nfd >= 0)
			wait_nic_sleep_end();
		wait_epoll_done(w);
		if (k < 0)
			return -err;
		bool ready = false;
		for (int i = 0; i < k; i++)
			ready |= ev[i].data.ptr == &wait_efd_tag;
		wait_consume(w, ready);
		for (int i = 0; i < k; i++)
			if (ev[i].data.ptr == &wait_notify_tag && ops) {
				wait_rx_notified();
				ops->run();
			}
		return 0;
	}
	unsigned n = nk;
	if (w)
		kfds[n++] = (struct pollfd){.fd = w->efd, .events = POLLIN};
	if (nfd >= 0)
		kfds[n++] = (struct pollfd){.fd = nfd, .events = POLLIN};
	struct timespec short_sleep = {0, 1000000};
	if (!w && (!timeout || timeout->tv_sec > 0 || timeout->tv_nsec > short_sleep.tv_nsec))
		timeout = &short_sleep; /* no waiter: nobody can wake us, so poll */
	if (nfd >= 0)
		wait_nic_sleep_begin();
	int rc = sys()->ppoll(kfds, n, timeout, sigmask);
	int err = errno;
	if (nfd >= 0)
		wait_nic_sleep_end();
	if (rc < 0)
		return -err;
	int mine = 0;
	for (unsigned i = 0; i < nk; i++)
		mine += kfds[i].revents != 0;
	if (w)
		wait_consume(w, kfds[nk].revents != 0);
	if (nfd >= 0 && kfds[n - 1].revents && ops) {
		wait_rx_notified();
		ops->run();
	}
	return mine;
}

int wait_block(struct waiter *w, struct pollfd *kfds, unsigned nk, const struct timespec *timeout,
	       const sigset_t *sigmask)
{
	int rc = wait_block_once(w, kfds, nk, timeout, sigmask);
	wait_spin_adapt();
	return rc;
}

static __thread volatile sig_atomic_t wait_sig_hit __attribute__((tls_model("initial-exec")));
static __thread volatile sig_atomic_t wait_sig_restart __attribute__((tls_model("initial-exec")));

void wait_signal_begin(void)
{
	wait_sig_hit = 0;
}

bool wait_signal_hit(void)
{
	return wait_sig_hit != 0;
}

void wait_signal_noted(bool restart)
{
	wait_sig_restart = restart;
	wait_sig_hit = 1;
}

bool wait_signals_restart(void)
{
	if (wait_sig_hit)
		return wait_sig_restart != 0;
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		/* Faults are raised by the faulting instruction itself and never
		 * interrupt a sleep, so their handlers (a sanitizer's) do not
		 * count. */
		if (sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS ||
		    sig == SIGFPE || sig == SIGILL || sig == SIGTRAP || sig == SIGSYS ||
		    sigaction(sig, NULL, &sa) != 0)
			continue;
		if (signal_catches(&sa) && !(sa.sa_flags & SA_RESTART))
			return false;
	}
	return true;
}

uint64_t wait_deadline_ms(int timeout_ms)
{
	if (timeout_ms < 0)
		return UINT64_MAX;
	return clock_now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

uint64_t wait_deadline_ts(const struct timespec *ts)
{
	if (!ts)
		return UINT64_MAX;
	return clock_now_ns() + (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
}

const struct timespec *wait_remaining(uint64_t deadline, struct timespec *buf)
{
	if (deadline == UINT64_MAX)
		return NULL;
	uint64_t now = clock_now_ns();
	uint64_t left = deadline > now ? deadline - now : 0;
	buf->tv_sec = (time_t)(left / 1000000000ull);
	buf->tv_nsec = (long)(left % 1000000000ull);
	return buf;
}
