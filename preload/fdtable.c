/* The fd table and the reference-counted files behind ferry's numbers. */
#include "autoconfig.h"

#include "preload/fdtable.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "preload/epoll.h"
#include "preload/fasync.h"
#include "preload/wait.h"

struct fdtable fdtab = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Past this many numbers the table would waste address space for nothing:
 * the kernel's nr_open default is 1,048,576. */
#define FDTABLE_MAX (1u << 22)

int fdtable_init(struct fdtable *t, size_t size)
{
	if (size == 0) {
		struct rlimit rl;
		size = 1024;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
			rlim_t lim = rl.rlim_max > rl.rlim_cur ? rl.rlim_max : rl.rlim_cur;
			size = lim == RLIM_INFINITY || lim > FDTABLE_MAX ? FDTABLE_MAX : (size_t)lim;
		}
	}
	/* Untouched pages cost nothing, so reserve the whole range at once
	 * rather than growing (and moving) it under concurrent readers. */
	void *m = mmap(NULL, size * sizeof(struct ffile *), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	pthread_mutex_init(&t->lock, NULL);
	t->free_list = NULL;
	t->live = 0;
	t->slots = m;
	__atomic_store_n(&t->size, size, __ATOMIC_RELEASE);
	return 0;
}

void fdtable_destroy(struct fdtable *t)
{
	if (t->slots) {
		size_t size = t->size;
		t->size = 0;
		munmap(t->slots, size * sizeof(struct ffile *));
		t->slots = NULL;
	}
	while (t->free_list) {
		struct ffile *f = t->free_list;
		t->free_list = f->free_next;
		pthread_mutex_destroy(&f->wlock);
		free(f);
	}
}

struct ffile *ffile_new(struct fdtable *t, enum ffile_kind kind)
{
	pthread_mutex_lock(&t->lock);
	struct ffile *f = t->free_list;
	if (f)
		t->free_list = f->free_next;
	pthread_mutex_unlock(&t->lock);
	if (!f) {
		f = calloc(1, sizeof(*f));
		if (!f)
			return NULL;
		pthread_mutex_init(&f->wlock, NULL);
	}
	f->kind = kind;
	f->mask = 0;
	f->status = 0;
	f->hybrid = false;
	f->gone = false;
	f->reset_read = false;
	f->epitems = NULL;
	f->waiters = NULL;
	f->owner = (struct ffile_owner){.type = F_OWNER_PID, .fd = -1};
	f->priv = NULL;
	f->release = NULL;
	f->fds = f->fd_inline;
	f->nfds = 0;
	f->cap_fds = 2;
	f->free_next = NULL;
	__atomic_add_fetch(&t->live, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&f->refs, 1, __ATOMIC_RELEASE);
	return f;
}

void ffile_get(struct ffile *f)
{
	__atomic_add_fetch(&f->refs, 1, __ATOMIC_RELAXED);
}

bool ffile_tryget(struct ffile *f)
{
	int r = __atomic_load_n(&f->refs, __ATOMIC_RELAXED);
	while (r > 0) {
		if (__atomic_compare_exchange_n(&f->refs, &r, r + 1, true, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return true;
	}
	return false;
}

void ffile_put(struct fdtable *t, struct ffile *f)
{
	if (__atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	/* Like the kernel, registrations die with the last reference to the
	 * file, not with the number they were made through. */
	epoll_file_gone(f);
	if (f->release)
		f->release(f);
	if (f->fds != f->fd_inline)
		free(f->fds);
	f->fds = f->fd_inline;
	f->priv = NULL;
	__atomic_sub_fetch(&t->live, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&t->lock);
	f->free_next = t->free_list;
	t->free_list = f;
	pthread_mutex_unlock(&t->lock);
}

struct ffile *fdtable_get(struct fdtable *t, int fd)
{
	if ((unsigned)fd >= __atomic_load_n(&t->size, __ATOMIC_ACQUIRE))
		return NULL;
	for (;;) {
		struct ffile *f = __atomic_load_n(&t->slots[fd], __ATOMIC_ACQUIRE);
		if (!f)
			return NULL;
		if (ffile_tryget(f)) {
			/* The slot may have been reassigned between the load and
			 * the reference: only a file still installed counts. */
			if (__atomic_load_n(&t->slots[fd], __ATOMIC_ACQUIRE) == f)
				return f;
			ffile_put(t, f);
		}
	}
}

static int ffile_add_fd(struct ffile *f, int fd)
{
	if (f->nfds == f->cap_fds) {
		unsigned cap = f->cap_fds * 2;
		int *n = malloc(cap * sizeof(int));
		if (!n)
			return -ENOMEM;
		memcpy(n, f->fds, f->nfds * sizeof(int));
		if (f->fds != f->fd_inline)
			free(f->fds);
		f->fds = n;
		f->cap_fds = cap;
	}
	f->fds[f->nfds++] = fd;
	return 0;
}

static void ffile_del_fd(struct ffile *f, int fd)
{
	for (unsigned i = 0; i < f->nfds; i++) {
		if (f->fds[i] == fd) {
			f->fds[i] = f->fds[--f->nfds];
			return;
		}
	}
}

int fdtable_install(struct fdtable *t, int fd, struct ffile *f)
{
	if (fd < 0 || (size_t)fd >= t->size)
		return -EMFILE;
	pthread_mutex_lock(&t->lock);
	int rc = 0;
	if (t->slots[fd])
		rc = -EEXIST;
	else
		rc = ffile_add_fd(f, fd);
	if (rc == 0) {
		ffile_get(f);
		__atomic_store_n(&t->slots[fd], f, __ATOMIC_RELEASE);
		if ((size_t)fd + 1 > t->hiwater)
			t->hiwater = (size_t)fd + 1;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

struct ffile *fdtable_remove(struct fdtable *t, int fd)
{
	if ((unsigned)fd >= t->size)
		return NULL;
	pthread_mutex_lock(&t->lock);
	struct ffile *f = t->slots[fd];
	if (f) {
		__atomic_store_n(&t->slots[fd], NULL, __ATOMIC_RELEASE);
		ffile_del_fd(f, fd);
	}
	pthread_mutex_unlock(&t->lock);
	return f;
}

unsigned fdtable_forget_file(struct fdtable *t, struct ffile *f)
{
	pthread_mutex_lock(&t->lock);
	unsigned n = f->nfds;
	for (unsigned i = 0; i < n; i++)
		__atomic_store_n(&t->slots[f->fds[i]], NULL, __ATOMIC_RELEASE);
	f->nfds = 0;
	pthread_mutex_unlock(&t->lock);
	for (unsigned i = 0; i < n; i++)
		ffile_put(t, f);
	return n;
}

void fdtable_each(struct fdtable *t, void (*fn)(struct ffile *f, void *arg), void *arg)
{
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->hiwater; i++)
		if (t->slots[i])
			fn(t->slots[i], arg);
	pthread_mutex_unlock(&t->lock);
}

unsigned ffile_fds(struct fdtable *t, struct ffile *f, int *out, unsigned max)
{
	pthread_mutex_lock(&t->lock);
	unsigned n = f->nfds;
	for (unsigned i = 0; i < n && i < max; i++)
		out[i] = f->fds[i];
	pthread_mutex_unlock(&t->lock);
	return n;
}

void ffile_notify(struct ffile *f, uint32_t mask, uint32_t events)
{
	__atomic_store_n(&f->mask, mask, __ATOMIC_RELEASE);
	/* A new urgent mark (the only event that carries EPOLLPRI) signals the
	 * owner with or without O_ASYNC, as sk_send_sigurg does. */
	if (events & EPOLLPRI)
		fasync_urgent(f);
	if (events && (__atomic_load_n(&f->status, __ATOMIC_RELAXED) & O_ASYNC))
		fasync_signal(f, events);
	/* Less ready: waiters and epoll harvests read the mask itself; only an
	 * instance watched from outside holds a readiness (its fd) to take back. */
	if (!events && !epoll_watched_any())
		return;
	pthread_mutex_lock(&f->wlock);
	if (events) {
		epoll_file_event(f, mask, events);
		for (struct wait_node *n = f->waiters; n; n = n->next)
			wait_wake(n->waiter);
	} else if (f->epitems) {
		epoll_file_quiet(f);
	}
	pthread_mutex_unlock(&f->wlock);
}
