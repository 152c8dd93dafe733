/* Per-destination memory for connect(): plain peers, sessions, sources. */
#include "autoconfig.h"

#include "preload/peercache.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "preload/sockaddr.h"
#include "transport/sys.h"

#define PEERCACHE_SLOTS 64

struct peer_key {
	uint16_t family;
	uint16_t port; /* 0 in the source table: keyed by address only */
	uint8_t addr[16];
};

struct peer_entry {
	struct peer_key key;
	bool used;
	uint64_t stamp;   /* insertion order, for eviction */
	uint64_t until;   /* plain table */
	/* Session table: the sessions to processes that answered; rendezvous
	 * asked for (counted as they start, so a burst of connects asks no
	 * more than the first few), answers recorded, connects, whose turn. */
	int session[PEERCACHE_HOLDERS];
	uint64_t token[PEERCACHE_HOLDERS];
	unsigned n, asked, found, turn, next;
	struct sockaddr_storage src; /* source table */
	socklen_t src_len;
};

static pthread_mutex_t pc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct peer_entry pc_plain[PEERCACHE_SLOTS], pc_sess[PEERCACHE_SLOTS],
	pc_src[PEERCACHE_SLOTS];
static uint64_t pc_clock;
/* Whether any table was ever written: a fork child of a process that never
 * used them (a server's) clears nothing, and faults in none of their pages. */
static bool pc_written;

static void key_of(const struct sockaddr *sa, bool with_port, struct peer_key *k)
{
	memset(k, 0, sizeof(*k));
	k->family = sa->sa_family;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		k->port = with_port ? in->sin_port : 0;
		memcpy(k->addr, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		k->port = with_port ? in6->sin6_port : 0;
		memcpy(k->addr, &in6->sin6_addr, 16);
	}
}

static struct peer_entry *find(struct peer_entry *t, const struct peer_key *k)
{
	for (unsigned i = 0; i < PEERCACHE_SLOTS; i++)
		if (t[i].used && !memcmp(&t[i].key, k, sizeof(*k)))
			return &t[i];
	return NULL;
}

static struct peer_entry *slot_for(struct peer_entry *t, const struct peer_key *k)
{
	struct peer_entry *e = find(t, k);
	if (e)
		return e;
	pc_written = true;
	e = &t[0];
	for (unsigned i = 0; i < PEERCACHE_SLOTS; i++) {
		if (!t[i].used) {
			e = &t[i];
			break;
		}
		if (t[i].stamp < e->stamp)
			e = &t[i];
	}
	memset(e, 0, sizeof(*e));
	e->key = *k;
	e->used = true;
	e->stamp = ++pc_clock;
	return e;
}

bool peercache_is_plain(const struct sockaddr *dst, uint64_t now_ns)
{
	struct peer_key k;
	key_of(dst, true, &k);
	pthread_mutex_lock(&pc_lock);
	struct peer_entry *e = find(pc_plain, &k);
	bool plain = e && e->until > now_ns;
	if (e && !plain)
		e->used = false;
	pthread_mutex_unlock(&pc_lock);
	return plain;
}

void peercache_set_plain(const struct sockaddr *dst, uint64_t now_ns)
{
	struct peer_key k;
	key_of(dst, true, &k);
	pthread_mutex_lock(&pc_lock);
	slot_for(pc_plain, &k)->until = now_ns + PEERCACHE_PLAIN_NS;
	pthread_mutex_unlock(&pc_lock);
}

/* Whose turn it is among e's sessions (pc_lock held); -1 when none. */
static int take_turn(struct peer_entry *e, uint64_t *token)
{
	if (!e || e->n == 0)
		return -1;
	unsigned i = e->next++ % e->n;
	*token = e->token[i];
	return e->session[i];
}

/* The sessions found for dst (pc_lock held), or NULL. */
static struct peer_entry *sessions_of(const struct sockaddr *dst)
{
	struct peer_key k;
	key_of(dst, true, &k);
	return find(pc_sess, &k);
}

int peercache_session(const struct sockaddr *dst, uint64_t *token, bool *another)
{
	pthread_mutex_lock(&pc_lock);
	struct peer_entry *e = sessions_of(dst);
	int s = -1;
	*another = false;
	if (e && e->n > 0) {
		unsigned every = e->n > 1 ? PEERCACHE_REPROBE_MANY : PEERCACHE_REPROBE_ONE;
		if (e->asked < PEERCACHE_PROBES || ++e->turn % every == 0) {
			e->asked++;
			*another = true;
		} else
			s = take_turn(e, token);
	}
	pthread_mutex_unlock(&pc_lock);
	return s;
}

void peercache_set_session(const struct sockaddr *dst, int session, uint64_t token)
{
	struct peer_key k;
	key_of(dst, true, &k);
	pthread_mutex_lock(&pc_lock);
	struct peer_entry *e = slot_for(pc_sess, &k);
	/* Every answer was asked for, by a look or a plain rendezvous. */
	if (e->asked < ++e->found)
		e->asked = e->found;
	unsigned i = 0;
	while (i < e->n && (e->session[i] != session || e->token[i] != token))
		i++;
	if (i == e->n) {
		/* Full: the places are reused in turn. */
		if (e->n == PEERCACHE_HOLDERS)
			i = e->found % PEERCACHE_HOLDERS;
		else
			e->n++;
		e->session[i] = session;
		e->token[i] = token;
	}
	pthread_mutex_unlock(&pc_lock);
}

int peercache_next(const struct sockaddr *dst, uint64_t *token)
{
	pthread_mutex_lock(&pc_lock);
	int s = take_turn(sessions_of(dst), token);
	pthread_mutex_unlock(&pc_lock);
	return s;
}

void peercache_drop_session(const struct sockaddr *dst, int session)
{
	pthread_mutex_lock(&pc_lock);
	struct peer_entry *e = sessions_of(dst);
	for (unsigned i = 0; e && i < e->n; i++) {
		if (e->session[i] != session)
			continue;
		e->n--;
		e->session[i] = e->session[e->n];
		e->token[i] = e->token[e->n];
		break;
	}
	pthread_mutex_unlock(&pc_lock);
}

int peercache_source(const struct sockaddr *dst, struct sockaddr_storage *src, socklen_t *len)
{
	struct peer_key k;
	key_of(dst, false, &k);
	pthread_mutex_lock(&pc_lock);
	struct peer_entry *e = find(pc_src, &k);
	if (e) {
		*src = e->src;
		*len = e->src_len;
	}
	pthread_mutex_unlock(&pc_lock);
	if (e)
		return 0;
	/* Ask the kernel's routing once: a connected UDP socket sends nothing. */
	const struct sys_fns *c = sys();
	int fd = c->socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct sockaddr_storage probe;
	socklen_t plen = sockaddr_len(dst->sa_family);
	memcpy(&probe, dst, plen);
	sockaddr_set_port((struct sockaddr *)&probe, 9);
	int rc = 0;
	*len = sizeof(*src);
	if (c->connect(fd, (struct sockaddr *)&probe, plen) != 0 ||
	    c->getsockname(fd, (struct sockaddr *)src, len) != 0)
		rc = -errno;
	c->close(fd);
	if (rc)
		return rc;
	sockaddr_set_port((struct sockaddr *)src, 0);
	pthread_mutex_lock(&pc_lock);
	e = slot_for(pc_src, &k);
	e->src = *src;
	e->src_len = *len;
	pthread_mutex_unlock(&pc_lock);
	return 0;
}

void peercache_reset(void)
{
	pthread_mutex_init(&pc_lock, NULL);
	if (!pc_written)
		return;
	memset(pc_plain, 0, sizeof(pc_plain));
	memset(pc_sess, 0, sizeof(pc_sess));
	memset(pc_src, 0, sizeof(pc_src));
	pc_written = false;
}
