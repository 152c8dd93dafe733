/* epoll over ferry files, merged with the kernel's epoll for plain fds. */
#include "autoconfig.h"

#include "preload/epoll.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/eventfd.h>
/* Out of memory, an add fails (leaving hh.tbl NULL) instead of exiting. */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/reentry.h"
#include "preload/sock.h"
#include "preload/wait.h"
#include "transport/clock.h"
#include "transport/sys.h"

#define EP_FLAG_BITS (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE | EPOLLWAKEUP)
/* A level-triggered list starved of kernel events is checked this often. */
#define EP_KERNEL_EVERY 8

struct fepoll;

struct epitem {
	struct fepoll *ep;
	struct ffile *file;
	int fd;
	uint32_t events;
	epoll_data_t data;
	bool ready, disabled, kernel;
	bool named; /* in ep->oneshots: only while epitem_kernel_oneshot */
	uint64_t token; /* its name in the one-shot instance, never reused */
	UT_hash_handle hh;
	struct epitem *rnext, *rprev; /* ready list (ep lock) */
	struct epitem *fnext, *fprev; /* file's list (file wlock) */
	struct epitem *enext, *eprev; /* instance's list (ep lock) */
};

struct fepoll {
	int epfd;
	int wakefd;
	pthread_mutex_t lock;
	struct epitem *items;
	struct epitem *rhead, *rtail;
	int sleepers; /* atomic */
	int watched;  /* atomic: inside another epoll or polled */
	int signaled; /* atomic: wakefd holds a count */
	struct wait_nic_reg nic; /* the nic's fd in the kernel instance (ep lock) */
	bool inherited; /* the kernel instance is shared with a fork parent */
	int nic_users; /* threads asleep here that want the nic's fd */
	unsigned calls;
	bool kernel_hot; /* the last look at the kernel instance found events */
	/* The kernel side of one-shot items of hybrid files lives in a kernel
	 * instance of its own, nested in epfd: the kernel reports only data,
	 * and an application's data can be anything, the same for two fds
	 * included, so only ferry's names go in there (ep lock). */
	int osfd; /* -1 until needed */
	uint64_t next_token;
	struct epitem *oneshots; /* by token */
};

/* Items this thread examined in the lists; see epoll_items_examined. */
static __thread unsigned long ep_examined __attribute__((tls_model("initial-exec")));

unsigned long epoll_items_examined(void)
{
	return ep_examined;
}

/* Tags for our own fds in a kernel instance: addresses nothing else has. */
static char ep_wake_tag, ep_notify_tag, ep_oneshot_tag;

static void ep_signal(struct fepoll *ep)
{
	if (__atomic_exchange_n(&ep->signaled, 1, __ATOMIC_ACQ_REL))
		return;
	uint64_t one = 1;
	ssize_t r = sys()->write(ep->wakefd, &one, sizeof(one));
	(void)r;
}

static void ep_drain(struct fepoll *ep)
{
	if (!__atomic_load_n(&ep->signaled, __ATOMIC_ACQUIRE))
		return;
	uint64_t v;
	ssize_t r = sys()->read(ep->wakefd, &v, sizeof(v));
	(void)r;
	__atomic_store_n(&ep->signaled, 0, __ATOMIC_RELEASE);
}

/* --- lists (ep lock held) --- */

static void ready_unlink(struct fepoll *ep, struct epitem *it)
{
	if (!it->ready)
		return;
	if (it->rprev)
		it->rprev->rnext = it->rnext;
	else
		ep->rhead = it->rnext;
	if (it->rnext)
		it->rnext->rprev = it->rprev;
	else
		ep->rtail = it->rprev;
	it->ready = false;
	it->rnext = it->rprev = NULL;
}

/* Returns whether the list was empty before. */
static bool ready_append(struct fepoll *ep, struct epitem *it)
{
	if (it->ready)
		return false;
	bool was_empty = ep->rhead == NULL;
	it->ready = true;
	it->rnext = NULL;
	it->rprev = ep->rtail;
	if (ep->rtail)
		ep->rtail->rnext = it;
	else
		ep->rhead = it;
	ep->rtail = it;
	return was_empty;
}

static void ep_items_unlink(struct fepoll *ep, struct epitem *it)
{
	if (it->eprev)
		it->eprev->enext = it->enext;
	else
		ep->items = it->enext;
	if (it->enext)
		it->enext->eprev = it->eprev;
}

/* file wlock held */
static void file_items_unlink(struct ffile *f, struct epitem *it)
{
	if (it->fprev)
		it->fprev->fnext = it->fnext;
	else
		f->epitems = it->fnext;
	if (it->fnext)
		it->fnext->fprev = it->fprev;
}

static uint32_t item_want(const struct epitem *it)
{
	return (it->events & ~(uint32_t)EP_FLAG_BITS) | EPOLLERR | EPOLLHUP;
}

/* Queues it as ready and wakes a sleeper if one may need it; returns whether
 * a wake-up was sent. */
static bool ep_make_ready(struct fepoll *ep, struct epitem *it, bool may_wake)
{
	pthread_mutex_lock(&ep->lock);
	bool was_empty = ready_append(ep, it);
	bool wake = may_wake && was_empty &&
		    (__atomic_load_n(&ep->sleepers, __ATOMIC_ACQUIRE) > 0 ||
		     __atomic_load_n(&ep->watched, __ATOMIC_RELAXED));
	pthread_mutex_unlock(&ep->lock);
	if (wake)
		ep_signal(ep);
	return wake;
}

void epoll_file_event(struct ffile *f, uint32_t mask, uint32_t events)
{
	bool exclusive_woken = false;
	for (struct epitem *it = f->epitems; it; it = it->fnext) {
		ep_examined++;
		if (it->disabled)
			continue;
		uint32_t want = item_want(it);
		if (!(events & want) || !(mask & want))
			continue;
		if (it->events & EPOLLEXCLUSIVE) {
			/* Every exclusive watcher sees the item on its next wait, but
			 * only one sleeping one is woken for it, as in the kernel. */
			bool sleeping = __atomic_load_n(&it->ep->sleepers, __ATOMIC_ACQUIRE) > 0 ||
					__atomic_load_n(&it->ep->watched, __ATOMIC_RELAXED);
			if (ep_make_ready(it->ep, it, !exclusive_woken && sleeping))
				exclusive_woken = true;
		} else {
			ep_make_ready(it->ep, it, true);
		}
	}
}

void epoll_file_quiet(struct ffile *f)
{
	for (struct epitem *it = f->epitems; it; it = it->fnext) {
		struct fepoll *ep = it->ep;
		if (!__atomic_load_n(&ep->watched, __ATOMIC_RELAXED))
			continue;
		pthread_mutex_lock(&ep->lock);
		struct epitem *r = ep->rhead;
		while (r) {
			struct epitem *next = r->rnext;
			ep_examined++;
			if (r->disabled || !(ffile_mask(r->file) & item_want(r)))
				ready_unlink(ep, r);
			r = next;
		}
		bool empty = ep->rhead == NULL;
		pthread_mutex_unlock(&ep->lock);
		if (empty)
			ep_drain(ep);
	}
}

/* A one-shot item of a hybrid file is armed on two sides, ferry's and its
 * kernel registration's: whichever reports it first disarms the other. */
static bool epitem_kernel_oneshot(const struct epitem *it)
{
	return it->kernel && (it->events & EPOLLONESHOT);
}

/* Sets it->kernel and it->events, keeping ep->oneshots (ep lock). */
static void epitem_set(struct epitem *it, bool kernel, uint32_t events)
{
	struct fepoll *ep = it->ep;
	it->kernel = kernel;
	it->events = events;
	bool is = epitem_kernel_oneshot(it);
	if (it->named && !is) {
		HASH_DEL(ep->oneshots, it);
		it->named = false;
	} else if (!it->named && is) {
		/* Unnamed (no memory): its kernel reports are dropped, and it
		 * fires through ferry only. */
		HASH_ADD(hh, ep->oneshots, token, sizeof(it->token), it);
		it->named = it->hh.tbl != NULL;
	}
}

/* The kernel instance ep's one-shot items go in, made on first use and
 * watched from epfd under a tag (ep lock); -1 if that failed. */
static int ep_oneshot_fd(struct fepoll *ep)
{
	if (ep->osfd >= 0)
		return ep->osfd;
	int fd = sys()->epoll_create1(EPOLL_CLOEXEC);
	if (fd < 0)
		return -1;
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ep_oneshot_tag};
	if (sys()->epoll_ctl(ep->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		sys()->close(fd);
		return -1;
	}
	ep->osfd = fd;
	return fd;
}

/* The registration of it's fd as the kernel should hold it: a fired
 * one-shot goes in disarmed, as the kernel keeps one, except that the
 * kernel adds EPOLLERR and EPOLLHUP to any registration (reports of a
 * disarmed item of the one-shot instance are dropped). */
static struct epoll_event epitem_kernel_event(const struct epitem *it, bool oneshot)
{
	struct epoll_event ev = {.events = it->events};
	if (oneshot)
		ev.data.u64 = it->token;
	else
		ev.data = it->data;
	if (it->disabled)
		ev.events &= (uint32_t)EP_FLAG_BITS;
	return ev;
}

/* Registers the item's fd for its hybrid file in its instance's kernel
 * epoll, a one-shot one under its token (ep lock); returns whether that
 * worked. */
static bool epitem_kernel_add(struct epitem *it)
{
	bool oneshot = it->events & EPOLLONESHOT;
	int kfd = oneshot ? ep_oneshot_fd(it->ep) : it->ep->epfd;
	struct epoll_event ev = epitem_kernel_event(it, oneshot);
	return kfd >= 0 && sys()->epoll_ctl(kfd, EPOLL_CTL_ADD, it->fd, &ev) == 0;
}

/* The kernel instance holding it's registration (it->kernel, ep lock). */
static int epitem_kernel_fd(const struct epitem *it)
{
	return epitem_kernel_oneshot(it) ? it->ep->osfd : it->ep->epfd;
}

/* Takes f out of every epoll set it is in; with to_kernel, each set first
 * gets f's kernel fd registered with the same interest. */
static void epoll_file_detach(struct ffile *f, bool to_kernel)
{
	pthread_mutex_lock(&f->wlock);
	struct epitem *it = f->epitems;
	f->epitems = NULL;
	while (it) {
		struct epitem *next = it->fnext;
		struct fepoll *ep = it->ep;
		pthread_mutex_lock(&ep->lock);
		if (to_kernel && (!it->kernel || epitem_kernel_oneshot(it))) {
			/* Ferry's name for a one-shot means nothing once the file
			 * is the kernel's alone: it moves to epfd as the app's. */
			if (it->kernel)
				sys()->epoll_ctl(epitem_kernel_fd(it), EPOLL_CTL_DEL, it->fd, NULL);
			struct epoll_event ev = epitem_kernel_event(it, false);
			sys()->epoll_ctl(ep->epfd, EPOLL_CTL_ADD, it->fd, &ev);
		}
		epitem_set(it, false, it->events);
		ready_unlink(ep, it);
		ep_items_unlink(ep, it);
		pthread_mutex_unlock(&ep->lock);
		free(it);
		it = next;
	}
	pthread_mutex_unlock(&f->wlock);
}

void epoll_file_gone(struct ffile *f) { epoll_file_detach(f, false); }

void epoll_file_kernelize(struct ffile *f) { epoll_file_detach(f, true); }

void epoll_file_hybrid(struct ffile *f)
{
	pthread_mutex_lock(&f->wlock);
	for (struct epitem *it = f->epitems; it; it = it->fnext) {
		/* Under the instance's lock: the kernel may report a one-shot
		 * as soon as it is registered, and is heard only for items in
		 * ep->oneshots. */
		pthread_mutex_lock(&it->ep->lock);
		if (!it->kernel && epitem_kernel_add(it))
			epitem_set(it, true, it->events);
		pthread_mutex_unlock(&it->ep->lock);
	}
	pthread_mutex_unlock(&f->wlock);
}

/* --- instances --- */

static void fepoll_release(struct ffile *file)
{
	struct fepoll *ep = file->priv;
	for (;;) {
		pthread_mutex_lock(&ep->lock);
		struct epitem *first = ep->items;
		struct ffile *f = first ? first->file : NULL;
		pthread_mutex_unlock(&ep->lock);
		if (!f)
			break;
		/* Files are type-stable, so taking this lock is safe even if f is
		 * being recycled; the item is looked up again under both locks. */
		pthread_mutex_lock(&f->wlock);
		pthread_mutex_lock(&ep->lock);
		for (struct epitem *it = ep->items; it; it = it->enext) {
			if (it->file != f)
				continue;
			epitem_set(it, false, it->events);
			ready_unlink(ep, it);
			ep_items_unlink(ep, it);
			file_items_unlink(f, it);
			free(it);
			break;
		}
		pthread_mutex_unlock(&ep->lock);
		pthread_mutex_unlock(&f->wlock);
	}
	if (ep->nic.kept)
		wait_nic_unkeep();
	sys()->close(ep->wakefd);
	if (ep->osfd >= 0)
		sys()->close(ep->osfd);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}

/* Makes the kernel instance epfd a ferry one; returns its file, referenced. */
static struct ffile *fepoll_convert(int epfd, int *err)
{
	struct fepoll *ep = calloc(1, sizeof(*ep));
	if (!ep) {
		*err = -ENOMEM;
		return NULL;
	}
	ep->epfd = epfd;
	pthread_mutex_init(&ep->lock, NULL);
	ep->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ep->wakefd < 0) {
		*err = -errno;
		free(ep);
		return NULL;
	}
	/* Also proves epfd is an epoll instance: the kernel refuses otherwise. */
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ep_wake_tag};
	if (sys()->epoll_ctl(epfd, EPOLL_CTL_ADD, ep->wakefd, &ev) != 0) {
		*err = -errno;
		sys()->close(ep->wakefd);
		free(ep);
		return NULL;
	}
	ep->nic.fd = -1;
	ep->osfd = -1;
	struct ffile *f = ffile_new(&fdtab, FFILE_EPOLL);
	if (!f) {
		sys()->close(ep->wakefd);
		free(ep);
		*err = -ENOMEM;
		return NULL;
	}
	f->priv = ep;
	f->release = fepoll_release;
	int rc = fdtable_install(&fdtab, epfd, f);
	if (rc < 0) {
		/* Another thread converted it first (-EEXIST): use theirs. */
		sys()->epoll_ctl(epfd, EPOLL_CTL_DEL, ep->wakefd, NULL);
		ffile_put(&fdtab, f);
		if (rc == -EEXIST) {
			struct ffile *other = fdtable_get(&fdtab, epfd);
			if (other && other->kind == FFILE_EPOLL)
				return other;
			if (other)
				ffile_put(&fdtab, other);
		}
		*err = rc == -EEXIST ? -EINVAL : rc;
		return NULL;
	}
	return f;
}

/* Walks the file's items, not the instance's: a file is in few sets, while
 * an instance may hold every connection of the process (file wlock). */
static struct epitem *ep_find(struct fepoll *ep, int fd, struct ffile *f)
{
	for (struct epitem *it = f->epitems; it; it = it->fnext) {
		ep_examined++;
		if (it->ep == ep && it->fd == fd)
			return it;
	}
	return NULL;
}

static int ep_ctl_ferry(struct fepoll *ep, int op, int fd, struct ffile *f,
			struct epoll_event *ev)
{
	int rc = 0;
	bool check = false;
	struct epitem *it;
	pthread_mutex_lock(&f->wlock);
	pthread_mutex_lock(&ep->lock);
	it = ep_find(ep, fd, f);
	switch (op) {
	case EPOLL_CTL_ADD:
		if (it) {
			rc = -EEXIST;
			break;
		}
		if ((ev->events & EPOLLEXCLUSIVE) &&
		    (ev->events & ~(uint32_t)(EPOLLIN | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND |
					      EPOLLWRNORM | EPOLLWRBAND | EPOLLERR | EPOLLHUP |
					      EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE))) {
			rc = -EINVAL; /* the kernel's EPOLLEXCLUSIVE_OK_BITS */
			break;
		}
		it = calloc(1, sizeof(*it));
		if (!it) {
			rc = -ENOMEM;
			break;
		}
		it->ep = ep;
		it->file = f;
		it->fd = fd;
		it->events = ev->events;
		it->data = ev->data;
		it->token = ++ep->next_token;
		it->enext = ep->items;
		if (it->enext)
			it->enext->eprev = it;
		ep->items = it;
		it->fnext = f->epitems;
		if (it->fnext)
			it->fnext->fprev = it;
		f->epitems = it;
		if (f->hybrid && epitem_kernel_add(it))
			epitem_set(it, true, it->events);
		check = true;
		break;
	case EPOLL_CTL_MOD:
		if (!it) {
			rc = -ENOENT;
			break;
		}
		if ((ev->events & EPOLLEXCLUSIVE) || (it->events & EPOLLEXCLUSIVE)) {
			rc = -EINVAL; /* the kernel refuses MOD on exclusive items */
			break;
		}
		it->data = ev->data;
		it->disabled = false;
		/* A one-shot's kernel side is in the one-shot instance, under
		 * ferry's name for it; anything else is in epfd as the app's. */
		bool same = it->kernel && epitem_kernel_oneshot(it) == !!(ev->events & EPOLLONESHOT);
		if (it->kernel && !same)
			sys()->epoll_ctl(epitem_kernel_fd(it), EPOLL_CTL_DEL, fd, NULL);
		epitem_set(it, same, ev->events);
		if (same) {
			struct epoll_event kev = epitem_kernel_event(it, epitem_kernel_oneshot(it));
			sys()->epoll_ctl(epitem_kernel_fd(it), EPOLL_CTL_MOD, fd, &kev);
		} else if (f->hybrid && epitem_kernel_add(it)) {
			epitem_set(it, true, it->events); /* it fired through ferry */
		}
		ready_unlink(ep, it);
		check = true;
		break;
	case EPOLL_CTL_DEL:
		if (!it) {
			rc = -ENOENT;
			break;
		}
		if (it->kernel)
			sys()->epoll_ctl(epitem_kernel_fd(it), EPOLL_CTL_DEL, fd, NULL);
		epitem_set(it, false, it->events);
		ready_unlink(ep, it);
		ep_items_unlink(ep, it);
		file_items_unlink(f, it);
		free(it);
		it = NULL;
		break;
	default:
		rc = -EINVAL;
	}
	pthread_mutex_unlock(&ep->lock);
	if (check && (ffile_mask(f) & item_want(it)))
		ep_make_ready(ep, it, true);
	pthread_mutex_unlock(&f->wlock);
	return rc;
}

void epoll_fork_child(struct ffile *f)
{
	struct fepoll *ep = f->priv;
	ep->nic_users = 0;
	/* wait_fork_child counts the places afresh. The instance is the
	 * parent's too: a nic kept there would wake the parent's sleepers for
	 * the child's packets, so this one adds it per sleep only. */
	ep->nic = (struct wait_nic_reg){.fd = -1};
	ep->inherited = true;
	__atomic_store_n(&ep->sleepers, 0, __ATOMIC_RELAXED);
}

static int ep_watched_any; /* atomic: some instance was marked watched */

bool epoll_watched_any(void)
{
	return __atomic_load_n(&ep_watched_any, __ATOMIC_ACQUIRE) != 0;
}

void epoll_mark_watched(struct ffile *f)
{
	__atomic_store_n(&ep_watched_any, 1, __ATOMIC_RELEASE);
	struct fepoll *ep = f->priv;
	pthread_mutex_lock(&ep->lock);
	if (!ep->watched && ep->nic.fd >= 0) {
		/* A packet would make the instance look readable to whoever
		 * watches it, with nothing behind it: from now on the progress
		 * thread alone watches the nic for this instance's sleepers. */
		wait_nic_remove(ep->epfd, &ep->nic);
	}
	__atomic_store_n(&ep->watched, 1, __ATOMIC_RELAXED);
	bool ready = ep->rhead != NULL;
	pthread_mutex_unlock(&ep->lock);
	if (ready)
		ep_signal(ep);
}

int fepoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (op != EPOLL_CTL_DEL && !ev)
		return -EFAULT;
	struct ffile *tf = fdtable_get(&fdtab, fd);
	if (tf && tf->kind != FFILE_SOCK && tf->kind != FFILE_TEST) {
		/* Epoll instances (and dead inherited fds) are the kernel's to
		 * watch: an instance's kernel fd carries its readiness. */
		if (tf->kind == FFILE_EPOLL && op == EPOLL_CTL_ADD)
			epoll_mark_watched(tf);
		ffile_put(&fdtab, tf);
		tf = NULL;
	}
	if (!tf)
		return sys()->epoll_ctl(epfd, op, fd, ev) == 0 ? 0 : -errno;
	if (fd == epfd) {
		ffile_put(&fdtab, tf);
		return -EINVAL;
	}
	int rc = 0;
	struct ffile *ef = fdtable_get(&fdtab, epfd);
	if (ef && ef->kind != FFILE_EPOLL) {
		ffile_put(&fdtab, ef);
		ffile_put(&fdtab, tf);
		return -EINVAL;
	}
	if (!ef) {
		if (op != EPOLL_CTL_ADD) {
			ffile_put(&fdtab, tf);
			return -ENOENT;
		}
		ef = fepoll_convert(epfd, &rc);
		if (!ef) {
			ffile_put(&fdtab, tf);
			return rc;
		}
	}
	rc = ep_ctl_ferry(ef->priv, op, fd, tf, ev);
	if (rc == 0 && op != EPOLL_CTL_DEL)
		sock_interest(tf); /* after the item is in: see lshare_fork_parent */
	ffile_put(&fdtab, ef);
	ffile_put(&fdtab, tf);
	return rc;
}

/* Copies out ready ferry items; level-triggered ones stay queued (at the
 * tail, so a busy fd does not starve the others). */
static int ep_harvest(struct fepoll *ep, struct epoll_event *out, int max)
{
	int n = 0;
	pthread_mutex_lock(&ep->lock);
	struct epitem *keep_head = NULL, *keep_tail = NULL;
	struct epitem *it = ep->rhead;
	while (it && n < max) {
		struct epitem *next = it->rnext;
		ep_examined++;
		uint32_t m = it->disabled ? 0 : ffile_mask(it->file) & item_want(it);
		ready_unlink(ep, it);
		if (m) {
			out[n].events = m;
			out[n].data = it->data;
			n++;
			if (it->events & EPOLLONESHOT) {
				it->disabled = true;
				if (it->kernel) {
					/* Out of the kernel until a MOD: a registration
					 * cannot be disarmed from outside. */
					sys()->epoll_ctl(epitem_kernel_fd(it), EPOLL_CTL_DEL,
							  it->fd, NULL);
					epitem_set(it, false, it->events);
				}
			} else if (!(it->events & EPOLLET)) {
				it->ready = true;
				it->rnext = NULL;
				it->rprev = keep_tail;
				if (keep_tail)
					keep_tail->rnext = it;
				else
					keep_head = it;
				keep_tail = it;
			}
		}
		it = next;
	}
	if (keep_head) {
		keep_head->rprev = ep->rtail;
		if (ep->rtail)
			ep->rtail->rnext = keep_head;
		else
			ep->rhead = keep_head;
		ep->rtail = keep_tail;
	}
	bool empty = ep->rhead == NULL;
	pthread_mutex_unlock(&ep->lock);
	if (empty)
		ep_drain(ep);
	return n;
}

/*
 * The one-shot instance has reports: the kernel disarmed those items, so
 * ferry's side goes too, and each reaches the app with the app's data.
 * Appends to ev[n..max); returns the new count. A report for a name no
 * item has (a registration left behind by a file gone while its kernel
 * file lives on elsewhere) or for a disarmed item is dropped.
 */
static int ep_oneshot_fired(struct fepoll *ep, struct epoll_event *ev, int n, int max)
{
	pthread_mutex_lock(&ep->lock);
	int k = ep->osfd < 0 ? 0 : sys()->epoll_pwait(ep->osfd, ev + n, max - n, 0, NULL);
	int end = n + (k > 0 ? k : 0);
	for (int i = n; i < end; i++) {
		struct epitem *it;
		HASH_FIND(hh, ep->oneshots, &ev[i].data.u64, sizeof(ev[i].data.u64), it);
		if (!it || it->disabled)
			continue;
		it->disabled = true;
		ready_unlink(ep, it);
		ev[n].events = ev[i].events;
		ev[n].data = it->data;
		n++;
	}
	pthread_mutex_unlock(&ep->lock);
	return n;
}

/* Removes our own entries from kernel results, adding the one-shot
 * instance's; returns the app's count. */
static int ep_filter(struct fepoll *ep, struct epoll_event *ev, int k, int max, bool *notified)
{
	int n = 0;
	bool oneshots = false;
	for (int i = 0; i < k; i++) {
		if (ev[i].data.ptr == &ep_wake_tag) {
			ep_drain(ep);
			continue;
		}
		if (ev[i].data.ptr == &ep_notify_tag) {
			*notified = true;
			continue;
		}
		if (ev[i].data.ptr == &ep_oneshot_tag) {
			oneshots = true;
			continue;
		}
		ev[n++] = ev[i];
	}
	/* Room for at least one: the tag's slot; the rest wait, readable. */
	if (oneshots)
		n = ep_oneshot_fired(ep, ev, n, max);
	return n;
}

/* A sleeper (counted in ep->sleepers) stops counting as the kernel returns:
 * the loop it runs next for the nic's packets then wakes only the others
 * for what it finds, not itself (a write and a read on the wake-up fd). */
static int ep_kernel(struct fepoll *ep, struct epoll_event *ev, int max, int timeout_ms,
		     const sigset_t *sigmask, bool sleeper)
{
	int k = sys()->epoll_pwait(ep->epfd, ev, max, timeout_ms, sigmask);
	int err = errno;
	if (sleeper)
		__atomic_sub_fetch(&ep->sleepers, 1, __ATOMIC_ACQ_REL);
	if (k < 0)
		return -err;
	bool notified = false;
	k = ep_filter(ep, ev, k, max, &notified);
	/* A hint shared by the instance's waiters; a stale value only moves
	 * one look at the kernel. */
	__atomic_store_n(&ep->kernel_hot, k > 0, __ATOMIC_RELAXED);
	if (notified) {
		wait_rx_notified();
		wait_progress_run();
	}
	return k;
}

/*
 * The nic's fd is in the kernel instance while a thread sleeps there, and
 * between sleeps too when the instance keeps it (wait_nic_keep): while it
 * is, every packet runs the instance's wake-up callback inside the sender's
 * system call, whether anyone sleeps or not. Exclusive: a packet wakes one
 * sleeping thread, not all of them (the others hear from it through their
 * wake-up fds). Edge triggered, yet nothing is missed: adding a readable fd
 * makes it ready at once, and a kept one that fired while nobody slept ends
 * the next sleep only if the packet is still there (epoll asks the socket
 * again before it reports).
 */
static void ep_nic_watch(struct fepoll *ep, int nfd)
{
	pthread_mutex_lock(&ep->lock);
	if (ep->nic_users++ == 0 && !__atomic_load_n(&ep->watched, __ATOMIC_RELAXED))
		wait_nic_add(ep->epfd, &ep->nic, nfd, &ep_notify_tag, !ep->inherited);
	pthread_mutex_unlock(&ep->lock);
	wait_nic_sleep_begin();
}

static void ep_nic_unwatch(struct fepoll *ep)
{
	wait_nic_sleep_end();
	pthread_mutex_lock(&ep->lock);
	if (--ep->nic_users == 0 && ep->nic.fd >= 0 && !ep->nic.kept)
		wait_nic_remove(ep->epfd, &ep->nic);
	pthread_mutex_unlock(&ep->lock);
}

/* A sleep without the nic (see wait_arm) must not be ended by its packets. */
static void ep_nic_unkeep(struct fepoll *ep)
{
	pthread_mutex_lock(&ep->lock);
	if (ep->nic_users == 0 && ep->nic.fd >= 0)
		wait_nic_remove(ep->epfd, &ep->nic);
	pthread_mutex_unlock(&ep->lock);
}

/* A spin found its events: while the instance's waiters spin, a kept nic's
 * fd would only put a wake-up callback into every packet's path. */
static void ep_spun(struct fepoll *ep)
{
	wait_spin_outcome(true);
	/* The lock only when there is something to drop: this is every
	 * spinning request's path. */
	if (__atomic_load_n(&ep->nic.kept, __ATOMIC_RELAXED))
		ep_nic_unkeep(ep);
}

static int ms_until(uint64_t deadline)
{
	if (deadline == UINT64_MAX)
		return -1;
	uint64_t now = clock_now_ns();
	if (deadline <= now)
		return 0;
	uint64_t ms = (deadline - now + 999999) / 1000000;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

static int ep_wait(struct fepoll *ep, struct epoll_event *events, int max, uint64_t deadline,
		   const sigset_t *sigmask)
{
	wait_signal_begin();
	wait_flush();
	int n = ep_harvest(ep, events, max);
	if (n > 0) {
		/* No system call when ferry has events, except now and then so
		 * plain fds are not starved by busy ferry ones; every time
		 * while the kernel side had something on the last look. */
		if (n < max && (__atomic_load_n(&ep->kernel_hot, __ATOMIC_RELAXED) ||
				++ep->calls % EP_KERNEL_EVERY == 0)) {
			int k = ep_kernel(ep, events + n, max - n, 0, NULL, false);
			if (k > 0)
				n += k;
		}
		return n;
	}
	unsigned spin_us = wait_spin_us();
	uint64_t now0 = clock_now_ns();
	uint64_t spin_end = now0 + (uint64_t)spin_us * 1000u;
	/* Not spinning, and the nic's last look found it empty: the sleep
	 * below ends at once for anything come since, so a look now would be
	 * a system call that finds nothing (pgbench -S -c 8: one a query). */
	bool look = spin_us || deadline <= now0 || !wait_rx_drained();
	for (unsigned i = 0; look; i++) {
		wait_spin_once();
		n = ep_harvest(ep, events, max);
		if (n > 0) {
			if (spin_us)
				ep_spun(ep);
			return n;
		}
		if (wait_signal_hit())
			return -EINTR;
		/* Not on the first turn: ferry's answer is usually there by then. */
		if (i % EP_KERNEL_EVERY == EP_KERNEL_EVERY - 1) {
			int k = ep_kernel(ep, events, max, 0, NULL, false);
			if (k != 0) {
				if (spin_us && k > 0)
					ep_spun(ep);
				return k;
			}
		}
		/* A long spin reads the clock only now and then (wait_spin_over). */
		if (spin_us && spin_end < deadline && !wait_spin_clock_turn(i))
			continue;
		uint64_t now = clock_now_ns();
		/* A spin that had its whole time ran out, even if preemption
		 * took it past the call's timeout as well. */
		if (now >= deadline && spin_us && now >= spin_end && spin_end <= deadline)
			wait_spin_outcome(false);
		/* Time is up before the kernel's turn came (a zero timeout): its
		 * fds get one look all the same. */
		if (now >= deadline && i % EP_KERNEL_EVERY != EP_KERNEL_EVERY - 1)
			return ep_kernel(ep, events, max, 0, NULL, false);
		if (now >= deadline)
			break;
		if (now >= spin_end) {
			if (spin_us)
				wait_spin_outcome(false);
			break;
		}
	}
	for (;;) {
		if (clock_now_ns() >= deadline)
			return 0;
		if (wait_signal_hit())
			return -EINTR;
		__atomic_add_fetch(&ep->sleepers, 1, __ATOMIC_ACQ_REL);
		int armed = wait_arm();
		if (armed == -EBUSY) {
			/* The holder's pass is short; a thread that slept now, with
			 * packets still queued, would be woken at once by them. */
			__atomic_sub_fetch(&ep->sleepers, 1, __ATOMIC_ACQ_REL);
			sched_yield();
			continue;
		}
		if (armed == -EAGAIN) {
			/* Packets were already waiting and the arm handled them:
			 * do not sleep. */
			__atomic_sub_fetch(&ep->sleepers, 1, __ATOMIC_ACQ_REL);
			n = ep_harvest(ep, events, max);
			if (n > 0)
				return n;
			continue;
		}
		n = ep_harvest(ep, events, max);
		if (n > 0) {
			__atomic_sub_fetch(&ep->sleepers, 1, __ATOMIC_ACQ_REL);
			return n;
		}
		/* Not armed (see wait_arm): the nic's fd would wake us for
		 * packets whoever holds the loop is about to take. */
		bool nic = armed >= 0;
		if (nic)
			ep_nic_watch(ep, armed);
		else
			ep_nic_unkeep(ep);
		int k = ep_kernel(ep, events, max, ms_until(deadline), sigmask, true);
		if (nic)
			ep_nic_unwatch(ep);
		if (k < 0)
			return k;
		n = k + ep_harvest(ep, events + k, max - k);
		if (n > 0)
			return n;
	}
}

int fepoll_wait(int epfd, struct epoll_event *events, int max, const struct timespec *timeout,
		const sigset_t *sigmask)
{
	if (max <= 0)
		return -EINVAL;
	struct ffile *f = fdtable_get(&fdtab, epfd);
	if (!f || f->kind != FFILE_EPOLL) {
		if (f)
			ffile_put(&fdtab, f);
		int ms = timeout ? ms_until(wait_deadline_ts(timeout)) : -1;
		int k = sys()->epoll_pwait(epfd, events, max, ms, sigmask);
		return k < 0 ? -errno : k;
	}
	int rc = ep_wait(f->priv, events, max, wait_deadline_ts(timeout), sigmask);
	ffile_put(&fdtab, f);
	return rc;
}

/* --- the libc edge --- */

FERRY_EXPORT int epoll_create(int size)
{
	return sys()->epoll_create(size);
}

FERRY_EXPORT int epoll_create1(int flags)
{
	return sys()->epoll_create1(flags);
}

FERRY_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return sys()->epoll_ctl(epfd, op, fd, ev);
	return (int)ferry_ret(fepoll_ctl(epfd, op, fd, ev));
}

static int ep_timeout(int ms, struct timespec *ts)
{
	ts->tv_sec = ms / 1000;
	ts->tv_nsec = (long)(ms % 1000) * 1000000L;
	return 0;
}

FERRY_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int max, int timeout,
			     const sigset_t *sigmask)
{
	if (!fdtable_maybe(&fdtab, epfd) || ferry_internal())
		return sys()->epoll_pwait(epfd, events, max, timeout, sigmask);
	struct timespec ts;
	if (timeout >= 0)
		ep_timeout(timeout, &ts);
	return (int)ferry_ret(fepoll_wait(epfd, events, max, timeout >= 0 ? &ts : NULL, sigmask));
}

FERRY_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int max, int timeout)
{
	if (!fdtable_maybe(&fdtab, epfd) || ferry_internal())
		return sys()->epoll_wait(epfd, events, max, timeout);
	return epoll_pwait(epfd, events, max, timeout, NULL);
}

#ifdef HAVE_EPOLL_PWAIT2
FERRY_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int max,
			      const struct timespec *timeout, const sigset_t *sigmask)
{
	if (!fdtable_maybe(&fdtab, epfd) || ferry_internal()) {
		if (!sys()->epoll_pwait2) {
			errno = ENOSYS;
			return -1;
		}
		return sys()->epoll_pwait2(epfd, events, max, timeout, sigmask);
	}
	return (int)ferry_ret(fepoll_wait(epfd, events, max, timeout, sigmask));
}
#endif
