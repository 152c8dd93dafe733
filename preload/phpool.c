/* Pools of blank and bound placeholder sockets, reused across connections. */
#include "autoconfig.h"

#include "preload/phpool.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

#include "preload/libc.h"

/* Enough for the connections a busy process opens and closes at once;
 * past it a socket is closed as before. Bound ones hold ports of the
 * host's ephemeral range, so they are kept fewer. */
#define PHPOOL_BLANK_MAX 256
#define PHPOOL_BOUND_MAX 256

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

static int pp_off;            /* atomic: descriptors are short (phpool_pressure) */
static int pp_limit;          /* atomic: RLIMIT_NOFILE's soft limit, as last read */
static unsigned pp_checks;    /* atomic */

bool phpool_pressure(int fd)
{
	int limit = __atomic_load_n(&pp_limit, __ATOMIC_RELAXED);
	/* The application may raise its limit at any time (redis does). */
	if (limit <= 0 || (__atomic_fetch_add(&pp_checks, 1, __ATOMIC_RELAXED) & 1023) == 0 ||
	    fd >= limit - limit / 4) {
		struct rlimit rl;
		limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < INT32_MAX
				? (int)rl.rlim_cur
				: INT32_MAX;
		__atomic_store_n(&pp_limit, limit, __ATOMIC_RELAXED);
	}
	if (fd >= limit - limit / 4)
		return __atomic_exchange_n(&pp_off, 1, __ATOMIC_RELAXED) == 0;
	if (fd < limit / 2 && __atomic_load_n(&pp_off, __ATOMIC_RELAXED))
		__atomic_store_n(&pp_off, 0, __ATOMIC_RELAXED);
	return false;
}

static bool pp_short(void)
{
	return __atomic_load_n(&pp_off, __ATOMIC_RELAXED) != 0;
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
	pthread_mutex_unlock(&pp_lock);
	if (fd >= 0)
		return fd;
	fd = libc()->socket(domain, SOCK_STREAM | SOCK_CLOEXEC, 0);
	return fd >= 0 ? fd : -errno;
}

void phpool_give(int domain, int hfd)
{
	int i = blank_index(domain);
	pthread_mutex_lock(&pp_lock);
	bool kept = pp_nblank[i] < PHPOOL_BLANK_MAX && !pp_short();
	if (kept)
		pp_blank[i][pp_nblank[i]++] = hfd;
	pthread_mutex_unlock(&pp_lock);
	if (!kept)
		libc()->close(hfd);
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
	/* From the top: the most recently given back, and usually the only
	 * address there is. */
	for (unsigned i = pp_nbound; i-- > 0;) {
		if (!memcmp(&pp_bound[i].key, &k, sizeof(k))) {
			fd = pp_bound[i].fd;
			*local = pp_bound[i].local;
			*llen = pp_bound[i].len;
			pp_bound[i] = pp_bound[--pp_nbound];
			break;
		}
	}
	pthread_mutex_unlock(&pp_lock);
	if (fd >= 0)
		return fd;
	const struct libc_fns *c = libc();
	fd = c->socket(domain, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	*llen = sizeof(*local);
	if (c->bind(fd, src, slen) != 0 || c->getsockname(fd, (struct sockaddr *)local, llen) != 0) {
		int err = errno;
		c->close(fd);
		return -err;
	}
	return fd;
}

void phpool_give_bound(int hfd, const struct sockaddr_storage *local, socklen_t llen)
{
	pthread_mutex_lock(&pp_lock);
	bool kept = pp_nbound < PHPOOL_BOUND_MAX && llen <= sizeof(*local) && !pp_short();
	if (kept) {
		struct bound_entry *e = &pp_bound[pp_nbound++];
		e->fd = hfd;
		key_of((const struct sockaddr *)local, &e->key);
		e->local = *local;
		e->len = llen;
	}
	pthread_mutex_unlock(&pp_lock);
	if (!kept)
		libc()->close(hfd);
}

void phpool_drain(void)
{
	const struct libc_fns *c = libc();
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
	pthread_mutex_unlock(&pp_lock);
	phpool_drain();
}

void phpool_fork_child(void)
{
	pthread_mutex_init(&pp_lock, NULL);
	phpool_drain();
}
