/* Listeners shared with other processes: see lshare.h. */
#include "autoconfig.h"

#include "preload/lshare.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mgmt/mgmt.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/handover.h"
#include "preload/listener.h"
#include "preload/reentry.h"
#include "preload/sock.h"
#include "preload/stream.h"
#include "transport/clock.h"
#include "transport/log.h"
#include "transport/stats.h"
#include "transport/sys.h"

/* Serialises taking a listener up and waking it (each issues mgmt commands,
 * which may not run under the endpoint lock), against the fork pass. */
static pthread_mutex_t lshare_lock = PTHREAD_MUTEX_INITIALIZER;

static void lshare_take_up(struct ffile *f, struct fsock *sk)
{
	int fd;
	if (!ferry_up() || ffile_fds(&fdtab, f, &fd, 1) == 0)
		return;
	struct sockaddr_storage a;
	socklen_t alen = sizeof(a);
	if (sys()->getsockname(fd, (struct sockaddr *)&a, &alen) != 0)
		return;
	unsigned flags = sock_listen_flags(fd, a.ss_family);
	if (sk->lis_reuse)
		flags |= MGMT_LISTEN_REUSEPORT;
	int rdv = sk->lis_rdv;
	sk->lis_rdv = -1;
	__atomic_store_n(&sk->lis_inherited, false, __ATOMIC_SEQ_CST);
	/* The listener first, then the rendezvous: a client waiting there (it
	 * came while no holder read) is answered at once, and its OPEN must
	 * find the listener, not a refusal. */
	ferry_lock();
	struct listener *l = listener_add((struct sockaddr *)&a, alen, sk->lis_backlog, f);
	if (l) {
		l->v6only = flags & MGMT_LISTEN_V6ONLY;
		l->shared = true;
	}
	ferry_unlock();
	if (!l)
		return;
	ferry_internal_enter();
	int rc = mgmt_listen_fd(ferry.mgmt, ferry.rpc, (struct sockaddr *)&a, alen, rdv, flags);
	int num = rc == 0 ? mgmt_listen_fd_number(ferry.mgmt, (struct sockaddr *)&a, alen) : -1;
	ferry_internal_leave();
	ferry_lock();
	if (rc < 0) {
		listener_remove(ferry.rpc, l, NULL);
	} else {
		sk->lis = l;
		sk->lis_rdv = num;
		sk->lis_shared = true;
	}
	ferry_unlock();
	if (rc < 0) {
		ferry_log(FERRY_LOG_WARN,
			  "an inherited listener is not accelerated in this process: its rendezvous "
			  "socket %s",
			  strerror(-rc));
		stats_inc(ferry_stats()->listeners_plain);
		return;
	}
	stats_inc(ferry_stats()->listeners);
	log_debug("lshare: an inherited listener answers rendezvous in this process");
}

static void lshare_set_dormant(struct fsock *sk, bool dormant)
{
	struct sockaddr_storage a;
	socklen_t alen = 0;
	ferry_lock();
	if (sk->lis) {
		a = sk->lis->addr;
		alen = sk->lis->addr_len;
	}
	ferry_unlock();
	if (!alen)
		return;
	ferry_internal_enter();
	mgmt_listen_dormant(ferry.mgmt, (struct sockaddr *)&a, alen, dormant);
	ferry_internal_leave();
}

void lshare_interest(struct ffile *f)
{
	if (f->kind != FFILE_SOCK)
		return;
	struct fsock *sk = f->priv;
	if (!sk || sk->state != FSOCK_LISTEN ||
	    (!__atomic_load_n(&sk->lis_inherited, __ATOMIC_SEQ_CST) &&
	     !__atomic_load_n(&sk->lis_dormant, __ATOMIC_SEQ_CST)))
		return;
	pthread_mutex_lock(&lshare_lock);
	if (sk->lis_inherited) {
		lshare_take_up(f, sk);
	} else if (sk->lis_dormant && ferry_state() == FERRY_ON) {
		__atomic_store_n(&sk->lis_dormant, false, __ATOMIC_SEQ_CST);
		lshare_set_dormant(sk, false);
	}
	pthread_mutex_unlock(&lshare_lock);
}

struct lshare_list {
	struct ffile **files;
	size_t n, cap;
};

static void lshare_collect(struct ffile *f, void *arg)
{
	struct lshare_list *l = arg;
	struct fsock *sk = f->priv;
	if (f->kind != FFILE_SOCK || !sk || sk->state != FSOCK_LISTEN || !sk->lis)
		return;
	for (size_t i = 0; i < l->n; i++)
		if (l->files[i] == f)
			return; /* a second number of it */
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		struct ffile **files = realloc(l->files, cap * sizeof(*files));
		if (!files)
			return;
		l->files = files;
		l->cap = cap;
	}
	ffile_get(f);
	l->files[l->n++] = f;
}

/* f is held by another process from now on: shared, and dormant unless
 * someone here waits on it (lshare_lock held). */
static void lshare_mark_shared(struct ffile *f)
{
	struct fsock *sk = f->priv;
	sk->lis_shared = true;
	ferry_lock();
	if (sk->lis)
		sk->lis->shared = true;
	ferry_unlock();
	if (__atomic_load_n(&sk->lis_dormant, __ATOMIC_SEQ_CST))
		return;
	/* Dormant first, then look for interest: a thread that adds the file
	 * to an epoll set or blocks in accept meanwhile either is seen here or
	 * sees the flag and wakes it (lshare_interest). */
	__atomic_store_n(&sk->lis_dormant, true, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&f->wlock);
	bool watched = f->epitems != NULL;
	pthread_mutex_unlock(&f->wlock);
	if (watched || __atomic_load_n(&sk->lis_waiters, __ATOMIC_SEQ_CST) > 0)
		__atomic_store_n(&sk->lis_dormant, false, __ATOMIC_SEQ_CST);
	else
		lshare_set_dormant(sk, true);
}

void lshare_fork_parent(void)
{
	struct lshare_list l = {0};
	pthread_mutex_lock(&lshare_lock);
	fdtable_each(&fdtab, lshare_collect, &l);
	for (size_t i = 0; i < l.n; i++)
		lshare_mark_shared(l.files[i]);
	pthread_mutex_unlock(&lshare_lock);
	for (size_t i = 0; i < l.n; i++)
		ffile_put(&fdtab, l.files[i]);
	free(l.files);
}

void lshare_passed(struct ffile *f)
{
	struct fsock *sk = f->priv;
	if (f->kind != FFILE_SOCK || !sk || sk->state != FSOCK_LISTEN || !sk->lis)
		return;
	pthread_mutex_lock(&lshare_lock);
	lshare_mark_shared(f);
	pthread_mutex_unlock(&lshare_lock);
}

/* Rendezvous numbers the child pass gave a file already: two listeners
 * sharing one socket (SO_REUSEPORT) each get a number of their own, since
 * mgmt closes the second it is handed for an address it answers already. */
#define LSHARE_CLAIMED_MAX 64
static int lshare_claimed[LSHARE_CLAIMED_MAX];
static unsigned lshare_nclaimed;

void lshare_fork_child_begin(void)
{
	pthread_mutex_init(&lshare_lock, NULL);
	lshare_nclaimed = 0;
}

void lshare_fork_child(struct ffile *f)
{
	struct fsock *sk = f->priv;
	if (!sk || sk->state != FSOCK_LISTEN || sk->lis_inherited)
		return; /* not a listener, or a second number of one done already */
	int num = sk->lis_rdv;
	bool claimed = false;
	for (unsigned i = 0; i < lshare_nclaimed; i++)
		claimed |= lshare_claimed[i] == num;
	if (num >= 0 && (claimed || lshare_nclaimed == LSHARE_CLAIMED_MAX))
		num = sys()->fcntl(num, F_DUPFD_CLOEXEC, num);
	else if (num >= 0)
		lshare_claimed[lshare_nclaimed++] = num;
	sk->lis_rdv = num;
	sk->lis = NULL; /* the parent's queue: gone with its stream layer here */
	sk->lis_dormant = false;
	sk->lis_shared = true;
	sk->lis_inherited = num >= 0;
	__atomic_store_n(&f->mask, 0, __ATOMIC_RELEASE);
}

void lshare_release(struct fsock *sk)
{
	if (sk->lis_inherited && sk->lis_rdv >= 0)
		sys()->close(sk->lis_rdv);
	sk->lis_inherited = false;
	sk->lis_rdv = -1;
}

/* --- connections queued on a listener this process lets go of --- */

/* How long an offered connection waits for another holder to take it. */
#define LSHARE_OFFER_NS (5000ull * 1000000ull)

static bool lshare_offers_room(struct lshare_offers *o)
{
	if (o->n < o->cap)
		return true;
	size_t cap = o->cap ? 2 * o->cap : 8;
	struct mgmt_offer *v = realloc(o->v, cap * sizeof(*v));
	if (!v)
		return false;
	o->v = v;
	o->cap = cap;
	return true;
}

static bool lshare_keep_stream(struct stream *s, void *arg)
{
	struct lshare_offers *o = arg;
	if (!lshare_offers_room(o) || !handover_keep_until(s, clock_now_ns() + LSHARE_OFFER_NS))
		return false;
	o->v[o->n++] = (struct mgmt_offer){
		.pid = (uint32_t)getpid(), .sid = s->sid, .peer_sid = s->peer_sid, .token = s->token};
	return true;
}

/* Another process's offer this one took but will not accept now (two old
 * workers let go at once, one read the other's offer): passed on. */
static void lshare_keep_offer(const struct mgmt_offer *offer, void *arg)
{
	struct lshare_offers *o = arg;
	if (lshare_offers_room(o))
		o->v[o->n++] = *offer;
}

const struct listener_keep lshare_keep = {.stream = lshare_keep_stream,
					  .offer = lshare_keep_offer};

void lshare_send_offers(struct lshare_offers *o, const struct sockaddr *addr, socklen_t len)
{
	ferry_internal_enter();
	for (size_t i = 0; i < o->n; i++) {
		int rc = mgmt_offer(ferry.mgmt, addr, len, &o->v[i]);
		if (rc)
			log_debug("lshare: cannot offer a queued connection (%s)", strerror(-rc));
	}
	ferry_internal_leave();
	if (o->n)
		log_debug("lshare: %zu queued connections offered to the listener's other holders",
			  o->n);
	free(o->v);
	o->v = NULL;
	o->n = o->cap = 0;
}

void lshare_on_offer(void *ctx, const struct sockaddr *addr, socklen_t len,
		     const struct mgmt_offer *o)
{
	(void)ctx;
	(void)len;
	if (o->pid == (uint32_t)getpid())
		return; /* our own, read before we let go: nobody here accepts it */
	ferry_internal_enter();
	ferry_lock();
	struct listener *l = listener_find(addr);
	int rc = l ? listener_offer_add(l, o) : -ENOENT;
	ferry_unlock();
	ferry_internal_leave();
	if (rc)
		log_debug("lshare: an offered connection finds no listener here (%s)", strerror(-rc));
}
