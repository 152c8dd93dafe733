/* Pools of blank and bound placeholder sockets, reused across connections. */
#include "autoconfig.h"

#include "preload/phpool.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>

#include "transport/sys.h"

/* Enough for the connections a busy process opens and closes at once;
 * past it a socket is closed as before. Each pool also keeps no more than
 * a small share of RLIMIT_NOFILE (pp_cap), since what it keeps counts
 * against the application's own budget. */
#define PHPOOL_BLANK_MAX 256
#define PHPOOL_BOUND_MAX 256
#define PHPOOL_LIMIT_SHARE 32

struct bound_key {
	uint16_t family;
	uint32_t scope;
	uint8_t addr[16];
};

struct bound_entry {
	int fd;
	struct bound_key key;
	struct sockaddr_storage local;
	socklen_t len;
};

static pthread_mutex_t pp_lock = PTHREAD_MUTEX_INITIALIZER;
static int pp_blank[2][PHPOOL_BLANK_MAX];
static unsigned pp_nblank[2];
static struct bound_entry pp_bound[PHPOOL_BOUND_MAX];
static unsigned pp_nbound;

/* The fork generation each hidden descriptor was handed out in (index:
 * the descriptor), so one handed out before a fork is never kept again:
 * the child may hold a copy (one sitting between phpool_take and its
 * socket, or behind a closing stream). */
static unsigned pp_gen;
static unsigned *pp_taken_gen;
static int pp_ntaken;

static int pp_off;            /* atomic: descriptors are short (phpool_pressure) */
static int pp_limit;          /* atomic: RLIMIT_NOFILE's soft limit, as last read */
static unsigned pp_checks;    /* atomic */

/* RLIMIT_NOFILE's soft limit now (INT32_MAX: none). */
static int pp_limit_read(void)
{
	struct rlimit rl;
	int limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < INT32_MAX ? (int)rl.rlim_cur
										     : INT32_MAX;
	__atomic_store_n(&pp_limit, limit, __ATOMIC_RELAXED);
	return limit;
}

/*
 * A new hidden descriptor goes up to the floor (sys_fd_floor_of: half the
 * limit, capped) or above, so it never takes a number the kernel would give
 * the application next (the lowest free): the application's numbers stay
 * what they would be without ferry. Where nothing is free up there, the
 * number stays as it is.
 *
 * Where the application's numbers come close to the hidden ones: from
 * there, every hidden descriptor would push one of its numbers past where
 * the kernel alone would have put it, and a server that sizes its tables
 * by its connection limit (redis: maxclients plus 128) refuses the
 * connection that got it.
 */
static int pp_short_from(int limit)
{
	int floor = sys_fd_floor_of(limit);
	return floor - floor / 8;
}

bool phpool_pressure(int fd)
{
	int limit = __atomic_load_n(&pp_limit, __ATOMIC_RELAXED);
	/* The application may raise its limit at any time (redis does). */
	if (limit <= 0 || (__atomic_fetch_add(&pp_checks, 1, __ATOMIC_RELAXED) & 1023) == 0 ||
	    fd >= pp_short_from(limit))
		limit = pp_limit_read();
	int from = pp_short_from(limit);
	if (fd >= from)
		return __atomic_exchange_n(&pp_off, 1, __ATOMIC_RELAXED) == 0;
	if (fd < from / 2 && __atomic_load_n(&pp_off, __ATOMIC_RELAXED))
		__atomic_store_n(&pp_off, 0, __ATOMIC_RELAXED);
	return false;
}

static bool pp_short(void)
{
	return __atomic_load_n(&pp_off, __ATOMIC_RELAXED) != 0;
}

/* RLIMIT_NOFILE's soft limit, as last read (INT32_MAX: none). */
static int pp_limit_now(void)
{
	int limit = __atomic_load_n(&pp_limit, __ATOMIC_RELAXED);
	return limit > 0 ? limit : pp_limit_read();
}

/* How many sockets one pool keeps. */
static unsigned pp_cap(unsigned max)
{
	unsigned share = (unsigned)pp_limit_now() / PHPOOL_LIMIT_SHARE;
	return share < max ? share : max;
}

/*
 * The limit as last read serves (phpool_pressure reads it now and then),
 * unless it no longer fits: the application's numbers reached its floor
 * (the limit may have been raised, or descriptors are short), or the
 * kernel refuses the duplicate (the floor is past a lowered limit: EINVAL,
 * EMFILE under valgrind).
 */
static int pp_hide(int fd)
{
	const struct sys_fns *c = sys();
	int saved = errno;
	int floor = sys_fd_floor_of(pp_limit_now());
	bool fresh = false;
	if (fd >= floor) {
		floor = sys_fd_floor_of(pp_limit_read());
		fresh = true;
	}
	int high = fd >= floor ? fd : c->fcntl(fd, F_DUPFD_CLOEXEC, floor);
	if (high < 0 && !fresh) {
		floor = sys_fd_floor_of(pp_limit_read());
		high = fd >= floor ? fd : c->fcntl(fd, F_DUPFD_CLOEXEC, floor);
	}
	errno = saved;
	if (high < 0 || high == fd)
		return fd;
	c->close(fd);
	return high;
}

/*
 * The kernel grows a descriptor table that threads share only after an RCU
 * grace period (expand_fdtable): the first hidden descriptor, placed after
 * ferry's own threads had started, held a process's first connection for
 * 10-15 ms (a short-lived client's whole run took twice as long). Grown
 * while the process may still have one thread, the table costs no wait;
 * it never shrinks, and the hidden descriptors would grow it anyway.
 */
void phpool_grow_table(void)
{
	const struct sys_fns *c = sys();
	int saved = errno;
	int any = eventfd(0, EFD_CLOEXEC); /* 0, 1 and 2 may be closed (a daemon) */
	int fd = any < 0 ? -1 : c->fcntl(any, F_DUPFD_CLOEXEC, sys_fd_floor_of(pp_limit_read()));
	if (fd >= 0)
		c->close(fd);
	if (any >= 0)
		c->close(any);
	errno = saved;
}

/* Notes fd as handed out now; under pp_lock. */
static void pp_taken(int fd)
{
	if (fd >= pp_ntaken) {
		int n = pp_ntaken ? pp_ntaken : 64;
		while (n <= fd)
			n *= 2;
		unsigned *ng = realloc(pp_taken_gen, (size_t)n * sizeof(*ng));
		if (!ng)
			return; /* never kept: see pp_keepable */
		memset(ng + pp_ntaken, 0xff, (size_t)(n - pp_ntaken) * sizeof(*ng));
		pp_taken_gen = ng;
		pp_ntaken = n;
	}
	pp_taken_gen[fd] = pp_gen;
}

/* A new socket, hidden and noted as handed out. */
static int pp_hide_taken(int fd)
{
	fd = pp_hide(fd);
	pthread_mutex_lock(&pp_lock);
	pp_taken(fd);
	pthread_mutex_unlock(&pp_lock);
	return fd;
}

/* fd was handed out since the last fork; under pp_lock. */
static bool pp_keepable(int fd)
{
	return fd >= 0 && fd < pp_ntaken && pp_taken_gen[fd] == pp_gen && !pp_short();
}

static int blank_index(int domain)
{
	return domain == AF_INET6 ? 1 : 0;
}

static void key_of(const struct sockaddr *sa, struct bound_key *k)
{
	memset(k, 0, sizeof(*k));
	k->family = sa->sa_family;
	if (sa->sa_family == AF_INET) {
		memcpy(k->addr, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		memcpy(k->addr, &in6->sin6_addr, 16);
		k->scope = in6->sin6_scope_id;
	}
}

int phpool_take(int domain)
{
	if (pp_short())
		return -EMFILE;
	int i = blank_index(domain);
	pthread_mutex_lock(&pp_lock);
	int fd = pp_nblank[i] ? pp_blank[i][--pp_nblank[i]] : -1;
	if (fd >= 0)
		pp_taken(fd);
	pthread_mutex_unlock(&pp_lock);
	if (fd >= 0)
		return fd;
	fd = sys()->socket(domain, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	return pp_hide_taken(fd);
}

void phpool_give(int domain, int hfd)
{
	int i = blank_index(domain);
	pthread_mutex_lock(&pp_lock);
	bool kept = pp_nblank[i] < pp_cap(PHPOOL_BLANK_MAX) && pp_keepable(hfd);
	if (kept)
		pp_blank[i][pp_nblank[i]++] = hfd;
	pthread_mutex_unlock(&pp_lock);
	if (!kept)
		sys()->close(hfd);
}

int phpool_take_bound(int domain, const struct sockaddr *src, socklen_t slen,
		      struct sockaddr_storage *local, socklen_t *llen)
{
	if (src->sa_family != domain)
		return -EAFNOSUPPORT;
	if (pp_short())
		return -EMFILE;
	struct bound_key k;
	key_of(src, &k);
	int fd = -1;
	pthread_mutex_lock(&pp_lock);
	/* Oldest first: a port comes back as late as it can, the longer
	 * after its last connection ended (the peer's side of it too). */
	for (unsigned i = 0; i < pp_nbound; i++) {
		if (!memcmp(&pp_bound[i].key, &k, sizeof(k))) {
			fd = pp_bound[i].fd;
			*local = pp_bound[i].local;
			*llen = pp_bound[i].len;
			memmove(&pp_bound[i], &pp_bound[i + 1],
				(pp_nbound - i - 1) * sizeof(pp_bound[0]));
			pp_nbound--;
			pp_taken(fd);
			break;
		}
	}
	pthread_mutex_unlock(&pp_lock);
	if (fd >= 0)
		return fd;
	const struct sys_fns *c = sys();
	fd = c->socket(domain, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	*llen = sizeof(*local);
	if (c->bind(fd, src, slen) != 0 || c->getsockname(fd, (struct sockaddr *)local, llen) != 0) {
		int err = errno;
		c->close(fd);
		return -err;
	}
	return pp_hide_taken(fd);
}

void phpool_give_bound(int hfd, const struct sockaddr_storage *local, socklen_t llen)
{
	pthread_mutex_lock(&pp_lock);
	bool kept = pp_nbound < pp_cap(PHPOOL_BOUND_MAX) && llen <= sizeof(*local) &&
		    pp_keepable(hfd);
	if (kept) {
		struct bound_entry *e = &pp_bound[pp_nbound++];
		e->fd = hfd;
		key_of((const struct sockaddr *)local, &e->key);
		e->local = *local;
		e->len = llen;
	}
	pthread_mutex_unlock(&pp_lock);
	if (!kept)
		sys()->close(hfd);
}

void phpool_drain(void)
{
	const struct sys_fns *c = sys();
	pthread_mutex_lock(&pp_lock);
	for (int d = 0; d < 2; d++) {
		for (unsigned i = 0; i < pp_nblank[d]; i++)
			c->close(pp_blank[d][i]);
		pp_nblank[d] = 0;
	}
	for (unsigned i = 0; i < pp_nbound; i++)
		c->close(pp_bound[i].fd);
	pp_nbound = 0;
	pthread_mutex_unlock(&pp_lock);
}

void phpool_fork_prepare(void)
{
	pthread_mutex_lock(&pp_lock);
}

void phpool_fork_parent(void)
{
	pp_gen++;
	pthread_mutex_unlock(&pp_lock);
	phpool_drain();
}

void phpool_fork_child(void)
{
	pthread_mutex_init(&pp_lock, NULL);
	pp_gen++;
	phpool_drain();
}
