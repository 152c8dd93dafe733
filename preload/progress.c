/* The background progress thread and the try-lock event loop pass. */
#include "autoconfig.h"

#include "preload/progress.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "preload/ferry.h"
#include "preload/reentry.h"
#include "preload/rxbuf.h"
#include "preload/sock.h"
#include "preload/statmap.h"
#include "preload/stream.h"
#include "preload/wait.h"
#include "transport/clock.h"
#include "transport/config.h"
#include "transport/log.h"
#include "transport/rpc.h"
#include "transport/sys.h"
#include "transport/thread_pause.h"
#include "transport/txdefer.h"

static struct rpc *pg_rpc;
static int pg_efd = -1;
static int pg_ep = -1; /* the thread's epoll: its eventfd, the nic, ferry-stat's wake-up */
static int pg_dump;          /* atomic: a stats dump was asked for */
static uint64_t pg_last_run; /* atomic: when an application thread last ran the loop */
static uint64_t pg_tick_ns;
static int pg_notify_fd = -1;
static int pg_long_sleep; /* atomic: the thread sleeps longer than a tick */
static int pg_nic_replaced; /* atomic: the notify fd's socket was replaced */
static struct thread_pause pg_pause;

/* One pass of the loop, the lock held and ferry entered by the caller;
 * lets the lock go. */
static unsigned progress_pass_unlock(struct rpc *rpc)
{
	txdefer_begin();
	stream_tx_deferred_clear();
	unsigned n = stream_run_once(rpc);
	/* The pass's own clock: a spinning thread comes here every few hundred
	 * nanoseconds, and the tick it is compared with is a millisecond. */
	uint64_t now = rpc_pass_clock(rpc);
	bool busy = rpc_busy(rpc);
	rpc_unlock(rpc);
	txdefer_end(); /* inside ferry still, as in ferry_unlock */
	__atomic_store_n(&pg_last_run, now, __ATOMIC_RELAXED);
	if (busy)
		progress_note_work();
	return n;
}

static unsigned progress_run(void)
{
	struct rpc *rpc = pg_rpc;
	if (!rpc || !rpc_trylock(rpc))
		return 0;
	ferry_internal_enter();
	unsigned n = progress_pass_unlock(rpc);
	ferry_internal_leave();
	return n;
}

/* Only a thread that holds the lock may arm. Packets already waiting are
 * handled now, under the lock the arm took (-EAGAIN): a thread woken for
 * them takes the lock once, not once to arm and again to run the loop. */
static int progress_arm(void)
{
	struct rpc *rpc = pg_rpc;
	if (!rpc)
		return -1;
	if (!rpc_trylock(rpc))
		return -EBUSY;
	ferry_internal_enter();
	int rc = rpc_arm_notify(rpc);
	if (rc == 1) {
		progress_pass_unlock(rpc);
		ferry_internal_leave();
		return -EAGAIN;
	}
	int fd = rpc_notify_fd(rpc);
	bool busy = rpc_busy(rpc);
	ferry_internal_leave();
	rpc_unlock(rpc);
	/* The caller is about to sleep with no timer: somebody must tick. */
	if (busy)
		progress_note_work();
	return rc == 0 ? fd : -1;
}

static bool progress_rx_drained(void)
{
	struct rpc *rpc = pg_rpc;
	return rpc && rpc_rx_drained(rpc);
}

static void progress_rx_notified(void)
{
	struct rpc *rpc = pg_rpc;
	if (rpc)
		rpc_rx_notified(rpc);
}

static const struct wait_progress_ops pg_ops = {
	.run = progress_run,
	.arm = progress_arm,
	.flush = ferry_flush,
	.rx_drained = progress_rx_drained,
	.rx_notified = progress_rx_notified,
};

/*
 * pg_long_sleep and the endpoint's work meet in sequentially consistent
 * order: the thread sets the flag, then looks for work under the endpoint
 * lock (progress_main); whoever makes work does so under the lock, then
 * reads the flag. One of the two sees the other. (A request a backend
 * answered with just before the thread's look, lost on the way, waited for
 * a timer nobody ran: pgbench -i under 5% loss hung, 1 run in 20.)
 */
void progress_note_work(void)
{
	if (pg_efd >= 0 && __atomic_load_n(&pg_long_sleep, __ATOMIC_SEQ_CST) &&
	    __atomic_exchange_n(&pg_long_sleep, 0, __ATOMIC_SEQ_CST)) {
		uint64_t one = 1;
		ssize_t r = sys()->write(pg_efd, &one, sizeof(one));
		(void)r;
	}
}

/* Sets *flag and wakes the thread (async-signal-safe). */
static void progress_wake_for(int *flag)
{
	__atomic_store_n(flag, 1, __ATOMIC_RELEASE);
	if (pg_efd >= 0) {
		uint64_t one = 1;
		ssize_t r = sys()->write(pg_efd, &one, sizeof(one));
		(void)r;
	}
}

void progress_nic_replaced(void)
{
	progress_wake_for(&pg_nic_replaced);
}

void progress_request_dump(void)
{
	progress_wake_for(&pg_dump);
}

/* An application thread that ran the loop this recently is taken to be
 * around: the nic's wake-ups go to it, not to this thread. */
#define PROGRESS_APP_IDLE_NS (20ull * 1000000ull)

/* Nothing in flight and an application thread asleep on the nic: packets
 * wake that thread and it runs the loop, so a tick would find nothing. This
 * thread looks in this many ticks later all the same, in case the woken
 * thread then works for long without ferry while packets come (the peer's
 * retransmission covers the wait). pgbench -S -c 8: each backend's thread
 * ticked 1,000 times a second for nothing. */
#define PROGRESS_ASLEEP_TICKS 4

static char pg_efd_tag, pg_notify_tag, pg_stat_tag;

/* The background thread's pass: nobody's reply is waiting to go with the
 * answers, so they are sent at once. */
static void progress_pass(struct rpc *rpc)
{
	stream_tx_deferred_clear();
	/* A retransmission timer 2 ms out fired 15-20 ms late from ticks
	 * alone: their passes, idle, read the clock every 16th. */
	rpc_clock_update(rpc);
	stream_run_once(rpc);
	if (stream_tx_deferred()) {
		stream_tx_deferred_clear();
		rpc_flush(rpc);
	}
}

static void *progress_main(void *arg)
{
	struct rpc *rpc = arg;
	const struct sys_fns *c = sys();
	ferry_internal_enter(); /* everything this thread does is ferry's own */
	sys()->prctl(PR_SET_NAME, "ferry-progress");
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	int ep = pg_ep;
	bool watching = false;
	for (;;) {
		thread_pause_point(&pg_pause);
		bool busy = true;
		int armed = -1;
		uint64_t now = clock_now_ns();
		uint64_t since = now - __atomic_load_n(&pg_last_run, __ATOMIC_RELAXED);
		bool app_active = since < PROGRESS_APP_IDLE_NS;
		bool spares = false;
		if (rpc_trylock(rpc)) {
			txdefer_begin(); /* its sends too leave after the unlock */
			/* Application threads running the loop keep timers going;
			 * only step in when they have not for a tick. */
			if (since >= pg_tick_ns || stream_tx_deferred())
				progress_pass(rpc);
			busy = rpc_busy(rpc) || stream_work_pending();
			rxbuf_spares_trim(now);
			spares = rxbuf_spare_bytes() > 0;
			if (!app_active) {
				armed = rpc_arm_notify(rpc);
				if (armed == 1)
					progress_pass(rpc);
			}
			rpc_unlock(rpc);
			txdefer_end();
		}
		if (armed == 1)
			continue;
		if (stream_redirect_pending())
			sock_redirects_run();
		/* The nic's fd is registered exclusively everywhere (by an
		 * application thread only while it sleeps, ep_nic_watch), and the
		 * kernel wakes the first registered instance with a sleeper: held
		 * here, it would take packets from application threads that
		 * registered later, so only while the application is away. */
		/* The registration went with the socket it was made on. */
		if (__atomic_exchange_n(&pg_nic_replaced, 0, __ATOMIC_ACQ_REL))
			watching = false;
		bool want = armed == 0;
		if (want != watching) {
			struct epoll_event nev = {.events = EPOLLIN | EPOLLET | EPOLLEXCLUSIVE,
						  .data.ptr = &pg_notify_tag};
			if (c->epoll_ctl(ep, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, pg_notify_fd,
					 &nev) == 0)
				watching = want;
		}
		/* Busy, or the application around: tick, so retransmission timers
		 * and deferred writes go out even if the application has gone
		 * off elsewhere. Otherwise sleep until a packet or a request. */
		int timeout = -1;
		if (busy || !watching) {
			timeout = (int)(pg_tick_ns / 1000000u);
			if (timeout == 0)
				timeout = 1;
			if (!busy && wait_nic_sleeping())
				timeout *= PROGRESS_ASLEEP_TICKS;
		}
		/* Keepalive and user timeouts count from a quiet peer: only a pass
		 * now and then notices (stream_timed_check checks ten times a
		 * second). */
		if (timeout < 0 && stream_timed_pending())
			timeout = 100;
		/* Receive rings kept from a burst go back once it is over. */
		if (timeout < 0 && spares)
			timeout = (int)(RXBUF_TRIM_NS / 1000000u);
		bool long_sleep = timeout < 0;
		if (long_sleep) {
			__atomic_store_n(&pg_long_sleep, 1, __ATOMIC_SEQ_CST);
			/* Work made since the look above, before the flag (see
			 * progress_note_work); a lock held by another thread may be
			 * making some. */
			bool work = stream_tx_deferred() || !rpc_trylock(rpc);
			if (!work) {
				work = rpc_busy(rpc);
				rpc_unlock(rpc);
			}
			if (work) {
				__atomic_store_n(&pg_long_sleep, 0, __ATOMIC_SEQ_CST);
				timeout = 0;
			}
		}
		struct epoll_event ev[3];
		thread_pause_sleep_begin(&pg_pause);
		int k = c->epoll_wait(ep, ev, 3, timeout);
		thread_pause_sleep_end(&pg_pause);
		__atomic_store_n(&pg_long_sleep, 0, __ATOMIC_RELAXED);
		bool notified = false;
		for (int i = 0; i < k; i++) {
			if (ev[i].data.ptr == &pg_efd_tag) {
				uint64_t v;
				ssize_t r = c->read(pg_efd, &v, sizeof(v));
				(void)r;
			} else if (ev[i].data.ptr == &pg_stat_tag) {
				statmap_serve();
			} else {
				notified = true;
			}
		}
		if (__atomic_exchange_n(&pg_dump, 0, __ATOMIC_RELAXED))
			ferry_stats_dump();
		if (notified)
			rpc_rx_notified(rpc);
		if (notified && rpc_trylock(rpc)) {
			txdefer_begin();
			progress_pass(rpc);
			rpc_unlock(rpc);
			txdefer_end();
		}
	}
	return NULL;
}

int progress_start(struct rpc *rpc, const struct ferry_config *cfg, unsigned spin_us)
{
	pg_rpc = rpc;
	pg_tick_ns = (uint64_t)cfg->rto_us * 250u;
	if (pg_tick_ns < 100000u)
		pg_tick_ns = 100000u;
	rpc_lock(rpc);
	pg_notify_fd = rpc_notify_fd(rpc);
	rpc_unlock(rpc);
	/* Made here, not by the thread: a descriptor the thread made later
	 * would appear among the application's while it counts or reuses
	 * them. */
	pg_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (pg_efd < 0)
		return -errno;
	const struct sys_fns *c = sys();
	pg_ep = c->epoll_create1(EPOLL_CLOEXEC);
	if (pg_ep < 0) {
		int rc = -errno;
		c->close(pg_efd);
		pg_efd = -1;
		return rc;
	}
	struct epoll_event eev = {.events = EPOLLIN, .data.ptr = &pg_efd_tag};
	c->epoll_ctl(pg_ep, EPOLL_CTL_ADD, pg_efd, &eev);
	/* ferry-stat's wake-up: the tables are written only when asked for. */
	struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &pg_stat_tag};
	if (statmap_wake_fd() >= 0)
		c->epoll_ctl(pg_ep, EPOLL_CTL_ADD, statmap_wake_fd(), &sev);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t th;
	thread_pause_init(&pg_pause);
	thread_pause_running(&pg_pause, true);
	int rc = pthread_create(&th, &attr, progress_main, rpc);
	pthread_attr_destroy(&attr);
	if (rc) {
		thread_pause_running(&pg_pause, false);
		sys()->close(pg_efd);
		sys()->close(pg_ep);
		pg_efd = pg_ep = -1;
		return -rc;
	}
	wait_set_ceded_spins_spent(rpc_rx_syscall(rpc));
	wait_set_progress(&pg_ops, spin_us);
	return 0;
}

void progress_hold(void)
{
	thread_pause_hold(&pg_pause);
}

void progress_release(void)
{
	thread_pause_release(&pg_pause);
}

void progress_forget(void)
{
	thread_pause_init(&pg_pause);
	wait_set_progress(NULL, 0);
	pg_rpc = NULL;
	pg_efd = pg_ep = -1;
}
