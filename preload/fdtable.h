/*
 * The fd table: which descriptor numbers ferry owns, and the file objects
 * behind them. Every ferry file owns a real kernel fd (its placeholder), so
 * numbers never collide with the kernel's; dup'ed numbers share one
 * reference-counted file, as they share one open file description in the
 * kernel. The table is sized from RLIMIT_NOFILE's hard limit, so a process
 * that raises its soft limit later (redis does) still fits.
 *
 * Files are never returned to malloc: freed ones are recycled, so a thread
 * racing a close on another thread still reads a valid object and
 * ffile_tryget() refuses it.
 */
#ifndef FERRY_PRELOAD_FDTABLE_H
#define FERRY_PRELOAD_FDTABLE_H

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ffile_kind {
	FFILE_SOCK,  /* an eligible TCP socket: see socket.c */
	FFILE_EPOLL, /* an epoll instance holding ferry fds: see epoll.c */
	FFILE_DEAD,  /* inherited through fork: every use is an error */
	FFILE_TEST,  /* unit tests */
};

struct epitem;
struct wait_node;

struct ffile {
	int refs;              /* atomic: one per table slot, plus users in flight */
	enum ffile_kind kind;
	uint32_t mask;         /* atomic: readiness as EPOLL* bits */
	int status;            /* atomic: O_NONBLOCK and friends (F_GETFL) */
	bool hybrid;           /* the placeholder also has kernel readiness (listeners) */
	bool gone;             /* atomic: handed to the kernel; look the number up again */
	bool reset_read;       /* atomic: a dead file's reset was read (then EOF) */
	pthread_mutex_t wlock; /* guards epitems and waiters */
	struct epitem *epitems;
	struct wait_node *waiters;
	/* O_ASYNC's signal: the owner F_SETOWN or F_SETOWN_EX named (pid 0:
	 * none), F_SETSIG's signal (0: SIGIO) and the number O_ASYNC was set
	 * through (si_fd); under wlock (fasync.h). */
	struct ffile_owner {
		int type; /* F_OWNER_TID, F_OWNER_PID or F_OWNER_PGRP */
		pid_t pid;
		int sig;
		int fd;
	} owner;
	void *priv;                         /* the kind's object */
	void (*release)(struct ffile *f);   /* last reference gone: drop priv */
	/* Descriptor numbers in the table pointing here (table lock). */
	int *fds;
	unsigned nfds, cap_fds;
	int fd_inline[2];
	struct ffile *free_next;
};

struct fdtable {
	struct ffile **slots; /* atomic pointers */
	size_t size;
	pthread_mutex_t lock;
	unsigned long live;   /* files in use (atomic) */
	size_t hiwater;       /* one past the highest number ever installed */
	struct ffile *free_list;
};

/* The process's table (set up by fdtable_init on it before first use). */
extern struct fdtable fdtab;

/* Reserves room for size numbers (size 0: from RLIMIT_NOFILE). 0 or -errno. */
int fdtable_init(struct fdtable *t, size_t size);
/* Forgets every entry (tests; never with users in flight). */
void fdtable_destroy(struct fdtable *t);

/* Whether fd may be ferry's: the pass-through test on every call. */
static inline bool fdtable_maybe(const struct fdtable *t, int fd)
{
	return (unsigned)fd < t->size && __atomic_load_n(&t->slots[fd], __ATOMIC_ACQUIRE) != NULL;
}

/* A new file with one reference (the caller's), mask 0. NULL on -ENOMEM. */
struct ffile *ffile_new(struct fdtable *t, enum ffile_kind kind);
void ffile_get(struct ffile *f);
/* Takes a reference unless the last one is gone already (the file is on
 * its way out: its release may still be to run). */
bool ffile_tryget(struct ffile *f);
/* Drops a reference; the last one runs release and recycles the file. */
void ffile_put(struct fdtable *t, struct ffile *f);

/* The file behind fd with a reference taken, or NULL. */
struct ffile *fdtable_get(struct fdtable *t, int fd);
/* Points fd at f (taking a reference). -EMFILE when fd is past the table,
 * -EEXIST when fd is already ferry's. */
int fdtable_install(struct fdtable *t, int fd, struct ffile *f);
/* Unmaps fd and returns its file with the table's reference (the caller
 * puts it), or NULL if fd was not ferry's. */
struct ffile *fdtable_remove(struct fdtable *t, int fd);
/* Unmaps every number pointing at f, dropping the table's references; the
 * numbers become plain kernel fds. Returns how many there were. */
unsigned fdtable_forget_file(struct fdtable *t, struct ffile *f);
/* Calls fn on every file in the table (the table lock held: fn must not
 * call back into the table). For the fork child. */
void fdtable_each(struct fdtable *t, void (*fn)(struct ffile *f, void *arg), void *arg);
/* Copies up to max of f's numbers into out; returns how many f has. */
unsigned ffile_fds(struct fdtable *t, struct ffile *f, int *out, unsigned max);

/* Sets f's readiness mask and tells its watchers that events just
 * happened (edge-triggered watchers see every call with events != 0). */
void ffile_notify(struct ffile *f, uint32_t mask, uint32_t events);
static inline uint32_t ffile_mask(const struct ffile *f)
{
	return __atomic_load_n(&f->mask, __ATOMIC_ACQUIRE);
}
static inline bool ffile_nonblock(const struct ffile *f)
{
	return (__atomic_load_n(&f->status, __ATOMIC_RELAXED) & O_NONBLOCK) != 0;
}

static inline void ffile_set_nonblock(struct ffile *f, bool on)
{
	int st = __atomic_load_n(&f->status, __ATOMIC_RELAXED);
	st = on ? st | O_NONBLOCK : st & ~O_NONBLOCK;
	__atomic_store_n(&f->status, st, __ATOMIC_RELAXED);
}

#endif
