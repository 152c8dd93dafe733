/* The background progress thread and the try-lock event loop pass. */
#include "autoconfig.h"

#include "preload/progress.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "preload/epoll.h"
#include "preload/ferry.h"
#include "preload/libc.h"
#include "preload/wait.h"
#include "transport/clock.h"
#include "transport/config.h"
#include "transport/log.h"
#include "transport/rpc.h"

static struct rpc *pg_rpc;
static int pg_efd = -1;
static int pg_dump;          /* atomic: a stats dump was asked for */
static uint64_t pg_last_run; /* atomic: when an application thread last ran the loop */
static uint64_t pg_tick_ns;

static void progress_run(void)
{
	struct rpc *rpc = pg_rpc;
	if (!rpc || !rpc_trylock(rpc))
		return;
	ferry_internal_enter();
	rpc_run_once(rpc);
	ferry_internal_leave();
	rpc_unlock(rpc);
	__atomic_store_n(&pg_last_run, clock_now_ns(), __ATOMIC_RELAXED);
}

/* Only a thread that holds the lock may arm; one that cannot leaves the
 * wake-up to the holder, which is running the loop right now. */
static int progress_arm(void)
{
	struct rpc *rpc = pg_rpc;
	if (!rpc || !rpc_trylock(rpc))
		return -1;
	ferry_internal_enter();
	int rc = rpc_arm_notify(rpc);
	int fd = rpc_notify_fd(rpc);
	ferry_internal_leave();
	rpc_unlock(rpc);
	if (rc == 1)
		return -EAGAIN;
	return rc == 0 ? fd : -1;
}

static const struct wait_progress_ops pg_ops = {
	.run = progress_run,
	.arm = progress_arm,
};

void progress_request_dump(void)
{
	__atomic_store_n(&pg_dump, 1, __ATOMIC_RELAXED);
	if (pg_efd >= 0) {
		uint64_t one = 1;
		ssize_t r = libc()->write(pg_efd, &one, sizeof(one));
		(void)r;
	}
}

static void *progress_main(void *arg)
{
	struct rpc *rpc = arg;
	const struct libc_fns *c = libc();
	ferry_internal_enter(); /* everything this thread does is ferry's own */
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		bool busy = true;
		int armed = -1;
		uint64_t now = clock_now_ns();
		bool app_active = now - __atomic_load_n(&pg_last_run, __ATOMIC_RELAXED) < pg_tick_ns;
		if (rpc_trylock(rpc)) {
			/* Application threads running the loop keep timers going;
			 * only step in when they are not. */
			if (!app_active)
				rpc_run_once(rpc);
			busy = rpc_busy(rpc);
			if (!busy) {
				armed = rpc_arm_notify(rpc);
				if (armed == 1)
					rpc_run_once(rpc);
			}
			rpc_unlock(rpc);
		}
		if (armed == 1)
			continue;
		struct pollfd pfd[2] = {{.fd = pg_efd, .events = POLLIN}};
		nfds_t n = 1;
		if (armed == 0)
			pfd[n++] = (struct pollfd){.fd = rpc_notify_fd(rpc), .events = POLLIN};
		/* Idle: sleep until a packet or a request. Busy: tick so the
		 * retransmission timer runs even if no application thread does. */
		int timeout = busy ? (int)(pg_tick_ns / 1000000u) : -1;
		if (busy && timeout == 0)
			timeout = 1;
		c->poll(pfd, n, timeout);
		if (pfd[0].revents) {
			uint64_t v;
			ssize_t r = c->read(pg_efd, &v, sizeof(v));
			(void)r;
		}
		if (__atomic_exchange_n(&pg_dump, 0, __ATOMIC_RELAXED))
			ferry_stats_dump();
		if (n == 2 && pfd[1].revents && rpc_trylock(rpc)) {
			rpc_run_once(rpc);
			rpc_unlock(rpc);
		}
	}
	return NULL;
}

int progress_start(struct rpc *rpc, const struct ferry_config *cfg)
{
	pg_rpc = rpc;
	pg_tick_ns = (uint64_t)cfg->rto_us * 250u;
	if (pg_tick_ns < 100000u)
		pg_tick_ns = 100000u;
	pg_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (pg_efd < 0)
		return -errno;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t th;
	int rc = pthread_create(&th, &attr, progress_main, rpc);
	pthread_attr_destroy(&attr);
	if (rc) {
		libc()->close(pg_efd);
		pg_efd = -1;
		return -rc;
	}
	epoll_set_notify_fd(rpc_notify_fd(rpc));
	wait_set_progress(&pg_ops, cfg->spin_us);
	return 0;
}

void progress_forget(void)
{
	wait_set_progress(NULL, 0);
	epoll_set_notify_fd(-1);
	pg_rpc = NULL;
	pg_efd = -1;
}
