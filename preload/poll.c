/* poll, ppoll, select and pselect over a mix of ferry and kernel fds. */
#include "autoconfig.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "preload/epoll.h"
#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/reentry.h"
#include "preload/sock.h"
#include "preload/wait.h"
#include "transport/clock.h"
#include "transport/sys.h"

#define POLL_STACK 32

/* Internal: a file went to the kernel mid-wait; classify the fds again. */
#define POLL_REGROUP (-EXDEV)

struct poll_ctx {
	struct pollfd *fds;
	nfds_t n;
	struct ffile **files;     /* per entry: the ferry file or NULL */
	struct pollfd *kfds;      /* kernel fds (+2 for wait_block) */
	unsigned *kidx;           /* kfds[i] answers fds[kidx[i]] */
	unsigned nk;
	struct wait_node *nodes;  /* one per ferry file */
};

static uint32_t file_revents(const struct ffile *f, short events)
{
	if (f->kind == FFILE_DEAD)
		return POLLERR | POLLHUP | (events & (POLLIN | POLLOUT));
	uint32_t want = (uint32_t)(unsigned short)events | POLLERR | POLLHUP;
	return ffile_mask(f) & want;
}

/* Fills revents from ferry state; returns how many entries are ready. */
static int poll_scan(struct poll_ctx *c)
{
	int ready = 0;
	for (nfds_t i = 0; i < c->n; i++) {
		if (!c->files[i]) {
			c->fds[i].revents = 0;
			continue;
		}
		if (__atomic_load_n(&c->files[i]->gone, __ATOMIC_ACQUIRE))
			return POLL_REGROUP;
		c->fds[i].revents = (short)file_revents(c->files[i], c->fds[i].events);
		ready += c->fds[i].revents != 0;
	}
	return ready;
}

/* Folds kernel answers in; returns how many entries became ready. */
static int poll_merge(struct poll_ctx *c)
{
	int more = 0;
	for (unsigned i = 0; i < c->nk; i++) {
		if (!c->kfds[i].revents)
			continue;
		struct pollfd *p = &c->fds[c->kidx[i]];
		more += p->revents == 0;
		p->revents |= c->kfds[i].revents;
	}
	return more;
}

static void poll_link(struct poll_ctx *c, struct waiter *w, bool on)
{
	unsigned j = 0;
	for (nfds_t i = 0; i < c->n; i++) {
		if (!c->files[i])
			continue;
		if (on)
			wait_link(c->files[i], &c->nodes[j], w);
		else
			wait_unlink(c->files[i], &c->nodes[j]);
		j++;
	}
}

static int poll_run(struct poll_ctx *c, uint64_t deadline, const sigset_t *sigmask)
{
	wait_signal_begin();
	wait_flush();
	int ready = poll_scan(c);
	if (ready < 0)
		return ready;
	if (ready > 0 || deadline <= clock_now_ns()) {
		if (c->nk) {
			int k = sys()->poll(c->kfds, c->nk, 0);
			if (k < 0)
				return -errno;
			if (k > 0)
				ready += poll_merge(c);
		}
		return ready;
	}
	unsigned spin_us = wait_spin_us();
	uint64_t spin_end = clock_now_ns() + (uint64_t)spin_us * 1000u;
	/* A spin the call's timeout cuts short says nothing of the peer; one
	 * that had its whole time does, even if preemption then took it past
	 * the timeout as well. */
	bool whole = spin_end <= deadline;
	if (deadline < spin_end)
		spin_end = deadline;
	for (unsigned i = 0; spin_us && !wait_spin_over(i, spin_end); i++) {
		wait_spin_once();
		ready = poll_scan(c);
		if (ready < 0)
			return ready;
		if (ready > 0 || (c->nk && i % 8 == 7)) {
			if (c->nk) {
				int k = sys()->poll(c->kfds, c->nk, 0);
				if (k < 0)
					return -errno;
				if (k > 0)
					ready += poll_merge(c);
			}
			if (ready > 0) {
				wait_spin_outcome(true);
				return ready;
			}
		}
		if (wait_signal_hit())
			return -EINTR;
	}
	if (spin_us && whole)
		wait_spin_outcome(false);
	struct waiter *w = wait_self();
	for (;;) {
		if (w)
			poll_link(c, w, true);
		ready = poll_scan(c);
		int k = 0;
		if (ready < 0) {
			k = ready;
		} else if (ready == 0 && wait_signal_hit()) {
			k = -EINTR;
		} else if (ready == 0) {
			struct timespec ts;
			k = wait_block(w, c->kfds, c->nk, wait_remaining(deadline, &ts), sigmask);
		} else if (c->nk) {
			k = sys()->poll(c->kfds, c->nk, 0);
			k = k < 0 ? -errno : k;
		}
		if (w)
			poll_link(c, w, false);
		if (k < 0)
			return k;
		ready = poll_scan(c);
		if (ready < 0)
			return ready;
		if (k > 0)
			ready += poll_merge(c);
		if (ready > 0 || clock_now_ns() >= deadline)
			return ready;
	}
}

/* -errno, or the number of ready entries. */
static int fpoll_once(struct pollfd *fds, nfds_t n, uint64_t deadline, const sigset_t *sigmask)
{
	struct ffile *files_s[POLL_STACK];
	struct pollfd kfds_s[POLL_STACK + 2];
	unsigned kidx_s[POLL_STACK];
	struct wait_node nodes_s[POLL_STACK];
	struct poll_ctx c = {.fds = fds, .n = n};
	void *heap = NULL;
	if (n <= POLL_STACK) {
		c.files = files_s;
		c.kfds = kfds_s;
		c.kidx = kidx_s;
		c.nodes = nodes_s;
	} else {
		size_t sz = n * (sizeof(struct ffile *) + sizeof(struct pollfd) + sizeof(unsigned) +
				 sizeof(struct wait_node)) + 2 * sizeof(struct pollfd);
		heap = malloc(sz);
		if (!heap)
			return -ENOMEM;
		c.kfds = heap;
		c.files = (struct ffile **)(void *)(c.kfds + n + 2);
		c.nodes = (struct wait_node *)(void *)(c.files + n);
		c.kidx = (unsigned *)(void *)(c.nodes + n);
	}
	for (nfds_t i = 0; i < n; i++) {
		struct ffile *f = fds[i].fd >= 0 ? fdtable_get(&fdtab, fds[i].fd) : NULL;
		if (f && f->kind == FFILE_EPOLL) {
			epoll_mark_watched(f);
			ffile_put(&fdtab, f);
			f = NULL;
		}
		if (f)
			sock_interest(f);
		c.files[i] = f;
		if (!f || f->hybrid) {
			c.kfds[c.nk] = (struct pollfd){.fd = fds[i].fd, .events = fds[i].events};
			c.kidx[c.nk++] = (unsigned)i;
		}
	}
	int rc = poll_run(&c, deadline, sigmask);
	for (nfds_t i = 0; i < n; i++)
		if (c.files[i])
			ffile_put(&fdtab, c.files[i]);
	free(heap);
	return rc;
}

static int fpoll(struct pollfd *fds, nfds_t n, uint64_t deadline, const sigset_t *sigmask)
{
	int rc;
	do
		rc = fpoll_once(fds, n, deadline, sigmask);
	while (rc == POLL_REGROUP);
	return rc;
}

static bool poll_has_ferry(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (fdtable_maybe(&fdtab, fds[i].fd))
			return true;
	return false;
}

/* glibc declares poll's array write-only (__attr_access), so gcc believes
 * the definition reads uninitialised memory when it reads events. */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

FERRY_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (!poll_has_ferry(fds, n) || ferry_internal())
		return sys()->poll(fds, n, timeout);
	return (int)ferry_ret(fpoll(fds, n, wait_deadline_ms(timeout), NULL));
}

FERRY_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *timeout,
		       const sigset_t *sigmask)
{
	if (!poll_has_ferry(fds, n) || ferry_internal())
		return sys()->ppoll(fds, n, timeout, sigmask);
	return (int)ferry_ret(fpoll(fds, n, wait_deadline_ts(timeout), sigmask));
}

static bool select_has_ferry(int nfds, const fd_set *r, const fd_set *w, const fd_set *e)
{
	for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++) {
		if (!fdtable_maybe(&fdtab, fd))
			continue;
		if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e)))
			return true;
	}
	return false;
}

/* select as poll: the kernel's own select is poll underneath too. */
static int fselect(int nfds, fd_set *r, fd_set *w, fd_set *e, uint64_t deadline,
		   const sigset_t *sigmask)
{
	if (nfds < 0 || nfds > FD_SETSIZE)
		return -EINVAL;
	struct pollfd *fds = malloc((size_t)(nfds ? nfds : 1) * sizeof(*fds));
	if (!fds)
		return -ENOMEM;
	nfds_t n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (r && FD_ISSET(fd, r))
			ev |= POLLIN;
		if (w && FD_ISSET(fd, w))
			ev |= POLLOUT;
		if (e && FD_ISSET(fd, e))
			ev |= POLLPRI;
		if (ev)
			fds[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	int rc = fpoll(fds, n, deadline, sigmask);
	if (rc >= 0) {
		for (nfds_t i = 0; i < n; i++)
			if (fds[i].revents & POLLNVAL) {
				free(fds);
				return -EBADF;
			}
		if (r)
			FD_ZERO(r);
		if (w)
			FD_ZERO(w);
		if (e)
			FD_ZERO(e);
		rc = 0;
		for (nfds_t i = 0; i < n; i++) {
			short re = fds[i].revents;
			/* The kernel's select counts readable on error/hangup too. */
			if (r && (fds[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR))) {
				FD_SET(fds[i].fd, r);
				rc++;
			}
			if (w && (fds[i].events & POLLOUT) && (re & (POLLOUT | POLLERR))) {
				FD_SET(fds[i].fd, w);
				rc++;
			}
			if (e && (fds[i].events & POLLPRI) && (re & POLLPRI)) {
				FD_SET(fds[i].fd, e);
				rc++;
			}
		}
	}
	free(fds);
	return rc;
}

FERRY_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	if (!select_has_ferry(nfds, r, w, e) || ferry_internal())
		return sys()->select(nfds, r, w, e, tv);
	uint64_t deadline = UINT64_MAX;
	if (tv) {
		if (tv->tv_sec < 0 || tv->tv_usec < 0) {
			errno = EINVAL;
			return -1;
		}
		deadline = clock_now_ns() + (uint64_t)tv->tv_sec * 1000000000ull +
			   (uint64_t)tv->tv_usec * 1000ull;
	}
	int rc = fselect(nfds, r, w, e, deadline, NULL);
	if (tv) {
		/* Linux writes back the time left. */
		struct timespec left;
		wait_remaining(deadline, &left);
		tv->tv_sec = left.tv_sec;
		tv->tv_usec = left.tv_nsec / 1000;
	}
	return (int)ferry_ret(rc);
}

FERRY_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts,
			 const sigset_t *sigmask)
{
	if (!select_has_ferry(nfds, r, w, e) || ferry_internal())
		return sys()->pselect(nfds, r, w, e, ts, sigmask);
	return (int)ferry_ret(fselect(nfds, r, w, e, wait_deadline_ts(ts), sigmask));
}
