/* Socket calls: creation, rendezvous and fallback, accept, close, dup,
 * options and descriptor flags. */
#include "autoconfig.h"

#include <errno.h>
#include <limits.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "mgmt/mgmt.h"
#include "preload/epoll.h"
#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/handover.h"
#include "preload/libc.h"
#include "preload/listener.h"
#include "preload/lshare.h"
#include "preload/passfd.h"
#include "preload/peercache.h"
#include "preload/phpool.h"
#include "preload/sock.h"
#include "preload/stream.h"
#include "preload/wait.h"
#include "transport/clock.h"
#include "transport/log.h"
#include "transport/rpc.h"

/* --- helpers shared with io.c --- */

struct ffile *sock_get(int fd)
{
	struct ffile *f = fdtable_get(&fdtab, fd);
	if (f && f->kind != FFILE_SOCK && f->kind != FFILE_DEAD) {
		ffile_put(&fdtab, f);
		return NULL;
	}
	if (f && f->kind == FFILE_SOCK && ((struct fsock *)f->priv)->state == FSOCK_REMOTE)
		handover_adopt(f);
	return f;
}

void sock_interest(struct ffile *f)
{
	struct fsock *sk = f->priv;
	if (f->kind != FFILE_SOCK || !sk)
		return;
	if (sk->state == FSOCK_REMOTE)
		handover_adopt(f);
	else
		lshare_interest(f);
}

uint64_t sock_deadline(uint64_t timeo_ns)
{
	return timeo_ns ? clock_now_ns() + timeo_ns : UINT64_MAX;
}

void sock_sigpipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
}

int sock_wait(struct ffile *f, uint32_t want, uint64_t deadline, int kfd, short kevents)
{
	want |= EPOLLERR | EPOLLHUP;
	wait_flush();
	uint64_t spin_end = clock_now_ns() + (uint64_t)wait_spin_us() * 1000u;
	while (clock_now_ns() < spin_end) {
		if (ffile_mask(f) & want)
			return 0;
		wait_spin_once();
	}
	struct waiter *w = wait_self();
	struct wait_node node;
	for (;;) {
		if (ffile_mask(f) & want)
			return 0;
		if (clock_now_ns() >= deadline)
			return -EAGAIN;
		struct pollfd kfds[3];
		unsigned nk = 0;
		if (kfd >= 0)
			kfds[nk++] = (struct pollfd){.fd = kfd, .events = kevents};
		if (w)
			wait_link(f, &node, w);
		int rc = 0;
		if (!(ffile_mask(f) & want)) {
			struct timespec ts;
			rc = wait_block(w, kfds, nk, wait_remaining(deadline, &ts), NULL);
		}
		if (w)
			wait_unlink(f, &node);
		if (rc < 0)
			return rc;
		if (rc > 0)
			return 1;
		struct fsock *sk = f->priv;
		if (f->kind == FFILE_SOCK && sk && __atomic_load_n(&sk->kernel_gone, __ATOMIC_ACQUIRE))
			return 0;
	}
}

static bool sock_eligible(int domain, int type, int protocol)
{
	return (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
	       (protocol == 0 || protocol == IPPROTO_TCP);
}

static uint16_t sa_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)(const void *)sa)->sin6_port);
}

static socklen_t sa_len(int family)
{
	return family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* A v4-mapped v6 destination, as the v4 address the rendezvous goes to. */
static socklen_t sa_unmap(const struct sockaddr *sa, struct sockaddr_storage *out)
{
	const struct sockaddr_in6 *in6 = (const void *)sa;
	if (sa->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
		struct sockaddr_in *in = (void *)out;
		memset(out, 0, sizeof(*out));
		in->sin_family = AF_INET;
		in->sin_port = in6->sin6_port;
		memcpy(&in->sin_addr, &in6->sin6_addr.s6_addr[12], 4);
		return sizeof(*in);
	}
	socklen_t l = sa_len(sa->sa_family);
	memcpy(out, sa, l);
	return l;
}

static void copy_addr_out(const struct sockaddr_storage *ss, socklen_t len, struct sockaddr *addr,
			  socklen_t *alen)
{
	if (!addr || !alen)
		return;
	memcpy(addr, ss, *alen < len ? *alen : len);
	*alen = len;
}

/* --- lifecycle --- */

static void sock_drop_rendezvous(struct fsock *sk)
{
	if (sk->rdv_fd >= 0)
		libc()->close(sk->rdv_fd);
	sk->rdv_fd = -1;
}

static void sock_release(struct ffile *f)
{
	struct fsock *sk = f->priv;
	if (!sk)
		return;
	lshare_release(sk);
	/* A fork child's inherited sockets, or sockets of a ferry that is not
	 * running any more: never touch the sessions behind them. */
	if (f->kind == FFILE_DEAD || ferry_state() != FERRY_ON) {
		free(sk);
		return;
	}
	sock_drop_rendezvous(sk);
	struct sockaddr_storage la;
	socklen_t llen = 0;
	struct lshare_offers offers = {0};
	/* Connections queued on a listener another process shares go to it. */
	bool offer = sk->state == FSOCK_LISTEN && sk->lis_shared && handover_serve() == 0;
	ferry_lock();
	/* A child forked since the stream began may use it yet: no FIN while
	 * it holds a copy, as the kernel sends none while one is open. */
	if (sk->stream && handover_keep(sk->stream))
		sk->stream = NULL;
	if (sk->stream) {
		if (sk->ph_fd >= 0 && sk->ph_bound) {
			sk->stream->ph_fd = sk->ph_fd; /* pooled once the stream is gone */
			sk->ph_fd = -1;
		}
		if (sk->linger0)
			stream_abort(ferry.rpc, sk->stream);
		else
			stream_close(ferry.rpc, sk->stream);
		sk->stream = NULL;
	}
	if (sk->lis) {
		la = sk->lis->addr;
		llen = sk->lis->addr_len;
		struct listener_keep k = lshare_keep;
		k.arg = &offers;
		listener_remove(ferry.rpc, sk->lis, offer ? &k : NULL);
		sk->lis = NULL;
	}
	sk->state = FSOCK_FAILED;
	ferry_unlock();
	if (llen) {
		ferry_internal_enter();
		mgmt_unlisten(ferry.mgmt, (struct sockaddr *)&la, llen);
		ferry_internal_leave();
		lshare_send_offers(&offers, (struct sockaddr *)&la, llen);
	}
	if (sk->ph_fd >= 0) {
		if (sk->ph_bound)
			libc()->close(sk->ph_fd);
		else
			phpool_give(sk->domain, sk->ph_fd);
	}
	free(sk);
}

/* Makes fd's file ferry's socket; ph_fd is the pooled socket fd duplicates,
 * or -1. Returns 0 or -errno (fd stays plain, ph_fd untouched). */
static int sock_adopt(int fd, int domain, int type, int ph_fd)
{
	struct ffile *f = ffile_new(&fdtab, FFILE_SOCK);
	struct fsock *sk = calloc(1, sizeof(*sk));
	if (!f || !sk) {
		free(sk);
		if (f)
			ffile_put(&fdtab, f);
		return -ENOMEM;
	}
	sk->file = f;
	sk->domain = domain;
	sk->rdv_fd = -1;
	sk->lis_rdv = -1;
	sk->ph_fd = ph_fd;
	sk->cloexec = (type & SOCK_CLOEXEC) != 0;
	pthread_mutex_init(&sk->send_lock, NULL);
	f->priv = sk;
	f->release = sock_release;
	f->status = O_RDWR | ((type & SOCK_NONBLOCK) ? O_NONBLOCK : 0);
	/* tcp_poll's answer for a socket neither connected nor listening (an
	 * accepted stream's file gets its stream's next). */
	__atomic_store_n(&f->mask, EPOLLOUT | EPOLLHUP, __ATOMIC_RELEASE);
	int rc = fdtable_install(&fdtab, fd, f);
	if (rc == -EEXIST) {
		/* A stale entry: the number was closed behind our back. */
		struct ffile *old = fdtable_remove(&fdtab, fd);
		if (old)
			ffile_put(&fdtab, old);
		rc = fdtable_install(&fdtab, fd, f);
	}
	if (rc != 0)
		sk->ph_fd = -1; /* the caller's still */
	ffile_put(&fdtab, f);
	return rc;
}

struct fsock *sock_adopt_inherited(int fd, int domain, bool nonblock)
{
	if (sock_adopt(fd, domain, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), -1) != 0)
		return NULL;
	struct ffile *f = fdtable_get(&fdtab, fd);
	if (!f)
		return NULL;
	struct fsock *sk = f->priv;
	sk->bound = true;
	ffile_put(&fdtab, f);
	return sk;
}

/* Whether f's numbers are duplicates of a pooled socket the kernel keeps
 * no state of yet (file flags wait in f->status). */
static bool sock_pooled_clean(const struct fsock *sk)
{
	return __atomic_load_n(&sk->ph_fd, __ATOMIC_SEQ_CST) >= 0;
}

/* A pooled socket's kernel flags are a fresh socket's: ferry kept the
 * application's (F_SETFL, FIONBIO, SOCK_NONBLOCK) until the kernel owns it. */
static void sock_push_status(struct ffile *f, int fd)
{
	int st = __atomic_load_n(&f->status, __ATOMIC_RELAXED) & ~O_ACCMODE;
	if (st)
		libc()->fcntl(fd, F_SETFL, st);
}

/* Guards ph_fd of installed sockets: sock_local's swap, sock_let_go. */
static pthread_mutex_t ph_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * f's numbers become the only hold on its socket, the application's own
 * from now on: the hidden descriptor goes (the socket is never pooled
 * again), and the flags ferry kept reach the kernel (on fd, unless -1).
 * Under ph_lock.
 */
static void sock_let_go(struct ffile *f, int fd)
{
	struct fsock *sk = f->priv;
	if (f->kind != FFILE_SOCK || !sk || sk->ph_fd < 0)
		return;
	int h = sk->ph_fd;
	__atomic_store_n(&sk->ph_fd, -1, __ATOMIC_SEQ_CST);
	/* From here F_SETFL goes to the kernel itself; what it kept until now
	 * goes there first (the fence pairs with fcntl's and FIONBIO's). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (fd >= 0)
		sock_push_status(f, fd);
	libc()->close(h);
}

/* Called with the table's lock held (fdtable_each): f's numbers are stable. */
static void sock_let_go_each(struct ffile *f, void *arg)
{
	(void)arg;
	sock_let_go(f, f->nfds ? f->fds[0] : -1);
}

/*
 * Descriptors are running short (phpool_pressure): every live socket lets
 * go of its pooled socket's hidden descriptor (its numbers keep the socket;
 * it is simply the application's own from now on), and the pools close
 * theirs, so ferry never costs the application a descriptor it needs.
 */
/* Every live socket lets go of its hidden descriptor. */
static void sock_let_go_all(void)
{
	pthread_mutex_lock(&ph_lock); /* before the table's, as everywhere */
	fdtable_each(&fdtab, sock_let_go_each, NULL);
	pthread_mutex_unlock(&ph_lock);
}

static void sock_reclaim(void)
{
	sock_let_go_all();
	phpool_drain();
	log_info("descriptors running short: placeholders are not pooled for now");
}

void sock_kernel_own(struct ffile *f, int fd)
{
	struct fsock *sk = f->priv;
	if (f->kind != FFILE_SOCK || !sk || !sock_pooled_clean(sk))
		return;
	pthread_mutex_lock(&ph_lock);
	sock_let_go(f, fd);
	pthread_mutex_unlock(&ph_lock);
}

void sock_share_all(void)
{
	if (ferry_state() == FERRY_ON)
		sock_let_go_all();
}

static void sock_passed_fd(int fd, void *arg)
{
	(void)arg;
	if (!fdtable_maybe(&fdtab, fd))
		return;
	struct ffile *f = sock_get(fd);
	if (!f)
		return;
	const struct fsock *sk = f->priv;
	if (!passfd_sent(f, fd) && f->kind == FFILE_SOCK && sk && sk->stream)
		ferry_log_once(FERRY_LOG_WARN,
			       "fd %d, a connection ferry carries, was passed to another process "
			       "(SCM_RIGHTS) and cannot follow: the other process gets an unconnected "
			       "socket; leave its port to the kernel with FERRY_PORTS",
			       fd);
	/* The kernel socket is the receiver's too: never pooled. */
	sock_kernel_own(f, fd);
	ffile_put(&fdtab, f);
}

void sock_passed(const struct msghdr *msg)
{
	passfd_each(msg, sock_passed_fd, NULL);
}

/* The socket becomes the kernel's for good: registrations move to kernel
 * epolls, the numbers leave the table, waiters look again. The caller
 * holds a reference to f and has made the kernel own it (sock_kernel_own). */
static void sock_handoff(struct ffile *f)
{
	struct fsock *sk = f->priv;
	sock_drop_rendezvous(sk);
	epoll_file_kernelize(f);
	__atomic_store_n(&sk->kernel_gone, true, __ATOMIC_RELEASE);
	__atomic_store_n(&f->gone, true, __ATOMIC_RELEASE);
	fdtable_forget_file(&fdtab, f);
	ffile_notify(f, EPOLLOUT | EPOLLIN, EPOLLOUT | EPOLLIN);
}

static void count_fallback(int err)
{
	struct ferry_stats *st = ferry_stats();
	stats_inc(st->fallbacks);
	switch (err) {
	case -ETIMEDOUT:
		stats_inc(st->fallback_no_answer);
		break;
	case -ECONNREFUSED:
		stats_inc(st->fallback_refused);
		break;
	case -EALREADY:
		stats_inc(st->fallback_cached);
		break;
	case -EPFNOSUPPORT:
		stats_inc(st->fallback_port_filtered);
		break;
	default:
		stats_inc(st->fallback_unsupported);
	}
}

static int sock_kernel_connect(struct ffile *f, int fd, const struct sockaddr *a, socklen_t l)
{
	sock_kernel_own(f, fd);
	sock_handoff(f);
	return libc()->connect(fd, a, l) == 0 ? 0 : -errno;
}

void sock_fallback_async(struct ffile *f)
{
	struct fsock *sk = f->priv;
	int fd;
	if (ffile_fds(&fdtab, f, &fd, 1) == 0)
		return; /* closed meanwhile */
	sock_kernel_own(f, fd);
	int rc = libc()->connect(fd, (struct sockaddr *)&sk->dst, sk->dst_len);
	if (rc != 0 && errno != EINPROGRESS) {
		/* The application already has EINPROGRESS: report through
		 * SO_ERROR and readiness, as a failed kernel connect would. */
		ferry_lock();
		sk->state = FSOCK_FAILED;
		sk->so_error = errno;
		ferry_unlock();
		ffile_notify(f, EPOLLOUT | EPOLLERR | EPOLLHUP, EPOLLOUT | EPOLLERR | EPOLLHUP);
		return;
	}
	sock_handoff(f);
}

/* With the lock held: the stream on session to sk->dst. */
static int sock_open_stream(struct fsock *sk, int session, const struct sockaddr_storage *local,
			    socklen_t llen)
{
	struct stream *s;
	int rc = stream_open(ferry.rpc, session, sk->file, (struct sockaddr *)&sk->dst, sk->dst_len,
			     (const struct sockaddr *)local, llen, &s);
	if (rc)
		return rc;
	sk->stream = s;
	sk->state = FSOCK_STREAM;
	return 0;
}

/* The address (port 0) a socket of sk's family reaching dst binds. */
static int sock_source(const struct fsock *sk, const struct sockaddr *dst,
		       struct sockaddr_storage *out, socklen_t *olen)
{
	struct sockaddr_storage src;
	socklen_t slen;
	int rc = peercache_source(dst, &src, &slen);
	if (rc)
		return rc;
	if (sk->domain == AF_INET6 && src.ss_family == AF_INET) {
		/* A v6 socket reaching a v4 peer binds the mapped address. */
		struct sockaddr_in v4 = *(struct sockaddr_in *)(void *)&src;
		struct sockaddr_in6 *in6 = (void *)&src;
		memset(in6, 0, sizeof(*in6));
		in6->sin6_family = AF_INET6;
		in6->sin6_addr.s6_addr[10] = 0xff;
		in6->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&in6->sin6_addr.s6_addr[12], &v4.sin_addr, 4);
		slen = sizeof(*in6);
	}
	*out = src;
	*olen = slen;
	return 0;
}

/* The local address a ferry client shows: its placeholder is bound to the
 * source address and a real ephemeral port, so numbers are unique and
 * getsockname here matches getpeername at the server. */
static int sock_bind_local(struct fsock *sk, int fd, const struct sockaddr *dst,
			   struct sockaddr_storage *local, socklen_t *llen)
{
	const struct libc_fns *c = libc();
	*llen = sizeof(*local);
	if (sk->bound) {
		if (c->getsockname(fd, (struct sockaddr *)local, llen) != 0)
			return -errno;
		if (sa_port((struct sockaddr *)local) != 0)
			return 0;
	}
	struct sockaddr_storage src;
	socklen_t slen;
	int rc = sock_source(sk, dst, &src, &slen);
	if (rc)
		return rc;
	if (c->bind(fd, (struct sockaddr *)&src, slen) != 0)
		return -errno;
	*llen = sizeof(*local);
	return c->getsockname(fd, (struct sockaddr *)local, llen) == 0 ? 0 : -errno;
}

/*
 * As sock_bind_local, for a socket still on its blank pooled placeholder
 * and named by one number: that number is pointed at a bound pooled
 * socket instead (one dup3), whose port stays reserved while it is pooled,
 * so a connection costs no bind or getsockname; the blank one goes back.
 */
static int sock_local(struct ffile *f, int fd, const struct sockaddr *dst,
		      struct sockaddr_storage *local, socklen_t *llen)
{
	struct fsock *sk = f->priv;
	const struct libc_fns *c = libc();
	bool swapped = false;
	/* A first look; what counts is looked at again under the locks. */
	if (!sk->bound && sk->ph_fd >= 0 && !sk->ph_bound && !sk->cloexec_unknown) {
		struct sockaddr_storage src;
		socklen_t slen;
		int h = sock_source(sk, dst, &src, &slen);
		if (h == 0)
			h = phpool_take_bound(sk->domain, (struct sockaddr *)&src, slen, local, llen);
		if (h >= 0) {
			/* dup* hold ph_lock across their kernel call and the table's
			 * update, and close takes the number out of the table under
			 * its lock: each comes wholly before the swap (and the number
			 * is not the only one any more) or after it. */
			int blank = -1;
			pthread_mutex_lock(&ph_lock);
			pthread_mutex_lock(&fdtab.lock);
			if (sk->ph_fd >= 0 && !sk->cloexec_unknown && f->nfds == 1 &&
			    f->fds[0] == fd && c->dup3(h, fd, sk->cloexec ? O_CLOEXEC : 0) == fd) {
				blank = sk->ph_fd;
				sk->ph_fd = h;
				sk->ph_bound = true;
				swapped = true;
			}
			pthread_mutex_unlock(&fdtab.lock);
			pthread_mutex_unlock(&ph_lock);
			if (swapped)
				phpool_give(sk->domain, blank);
			else
				phpool_give_bound(h, local, *llen);
		}
	}
	if (swapped)
		return 0;
	sock_kernel_own(f, fd);
	return sock_bind_local(sk, fd, dst, local, llen);
}

static int session_cached(const struct sockaddr *dst)
{
	uint64_t tok;
	int ses = peercache_session(dst, &tok);
	if (ses >= 0 && !(rpc_session_is_up(ferry.rpc, ses) && rpc_session_token(ferry.rpc, ses) == tok))
		ses = -1;
	return ses;
}

static void sock_connect_done(void *ctx, int ses)
{
	struct ffile *f = ctx;
	struct fsock *sk = f->priv;
	ferry_internal_enter();
	ferry_lock();
	bool live = sk->state == FSOCK_CONNECTING;
	int rc = -ENOTCONN;
	if (live && ses >= 0) {
		peercache_set_session((struct sockaddr *)&sk->dst, ses,
				      rpc_session_token(ferry.rpc, ses));
		struct sockaddr_storage local;
		socklen_t llen = sizeof(local);
		int fd;
		if (ffile_fds(&fdtab, f, &fd, 1) &&
		    libc()->getsockname(fd, (struct sockaddr *)&local, &llen) == 0)
			rc = sock_open_stream(sk, ses, &local, llen);
	}
	if (live && rc != 0)
		sk->state = FSOCK_NEW;
	ferry_unlock();
	if (live && rc != 0) {
		if (ses == -ETIMEDOUT || ses == -ECONNREFUSED)
			peercache_set_plain((struct sockaddr *)&sk->dst, clock_now_ns());
		count_fallback(ses < 0 ? ses : rc);
		sock_fallback_async(f);
	}
	ffile_put(&fdtab, f);
	ferry_internal_leave();
}

static void sock_redirect_done(void *ctx, int ses)
{
	struct stream *s = ctx;
	ferry_internal_enter();
	ferry_lock();
	if (ses >= 0)
		peercache_set_session((struct sockaddr *)&s->peer, ses,
				      rpc_session_token(ferry.rpc, ses));
	stream_redirect_done(ferry.rpc, s, ses);
	ferry_unlock();
	ferry_internal_leave();
}

void sock_redirects_run(void)
{
	for (;;) {
		ferry_lock();
		struct stream *s = stream_take_redirect();
		struct sockaddr_storage dst;
		socklen_t len = s ? s->peer_len : 0;
		if (s)
			memcpy(&dst, &s->peer, len);
		ferry_unlock();
		if (!s)
			return;
		int rc = mgmt_connect_async_flags(ferry.mgmt, ferry.rpc, (struct sockaddr *)&dst, len,
						  ferry.cfg.connect_timeout_ms, MGMT_CONNECT_FRESH,
						  sock_redirect_done, s);
		if (rc) {
			ferry_lock();
			stream_redirect_done(ferry.rpc, s, rc);
			ferry_unlock();
		}
	}
}

static int sock_connect(struct ffile *f, int fd, const struct sockaddr *a, socklen_t l)
{
	struct fsock *sk = f->priv;
	const struct libc_fns *c = libc();
	if (f->kind == FFILE_DEAD || !a || (a->sa_family != AF_INET && a->sa_family != AF_INET6) ||
	    l < sa_len(a->sa_family) || a->sa_family != sk->domain ||
	    ferry_state() != FERRY_ON) {
		sock_kernel_own(f, fd);
		return c->connect(fd, a, l) == 0 ? 0 : -errno;
	}
	ferry_lock();
	enum fsock_state st = sk->state;
	int rc = 0;
	if (st == FSOCK_CONNECTING) {
		rc = -EALREADY;
	} else if (st == FSOCK_STREAM) {
		struct stream *s = sk->stream;
		if (s->state == STREAM_OPENING) {
			rc = -EALREADY;
		} else if (s->state == STREAM_FAILED) {
			rc = s->err ? -stream_take_error(s) : -ECONNRESET;
		} else if (sk->nb_connect) {
			/* Linux reports a completed non-blocking connect once more
			 * as success, then EISCONN. */
			sk->nb_connect = false;
			rc = 1;
		} else {
			rc = -EISCONN;
		}
	} else if (st == FSOCK_FAILED) {
		sk->state = FSOCK_NEW;
		sk->so_error = 0;
		st = FSOCK_NEW;
	}
	ferry_unlock();
	if (rc)
		return rc == 1 ? 0 : rc;
	if (st != FSOCK_NEW) {
		sock_kernel_own(f, fd);
		return c->connect(fd, a, l) == 0 ? 0 : -errno;
	}
	sock_drop_rendezvous(sk);
	ffile_notify(f, 0, 0); /* connecting: nothing to report, as in SYN_SENT */

	struct sockaddr_storage dst;
	socklen_t dlen = sa_unmap(a, &dst);
	uint16_t port = sa_port(a);
	if (!preload_config_port_allowed(&ferry.pcfg, port)) {
		count_fallback(-EPFNOSUPPORT);
		return sock_kernel_connect(f, fd, a, l);
	}
	if (peercache_is_plain((struct sockaddr *)&dst, clock_now_ns())) {
		count_fallback(-EALREADY);
		return sock_kernel_connect(f, fd, a, l);
	}
	struct sockaddr_storage local;
	socklen_t llen;
	rc = sock_local(f, fd, a, &local, &llen);
	if (rc) {
		log_debug("connect: no local address (%d): kernel", rc);
		count_fallback(rc);
		return sock_kernel_connect(f, fd, a, l);
	}
	memcpy(&sk->dst, a, l < sizeof(sk->dst) ? l : sizeof(sk->dst));
	sk->dst_len = l;
	bool nonblock = ffile_nonblock(f);

	ferry_lock();
	int ses = session_cached((struct sockaddr *)&dst);
	if (ses >= 0) {
		rc = sock_open_stream(sk, ses, &local, llen);
	} else if (nonblock) {
		sk->state = FSOCK_CONNECTING;
		ffile_get(f);
		ferry_unlock();
		ferry_internal_enter();
		sk->nb_connect = true;
		rc = mgmt_connect_async(ferry.mgmt, ferry.rpc, (struct sockaddr *)&dst, dlen,
					ferry.cfg.connect_timeout_ms, sock_connect_done, f);
		ferry_internal_leave();
		if (rc == 0)
			return -EINPROGRESS;
		ferry_lock();
		sk->state = FSOCK_NEW;
		ferry_unlock();
		ffile_put(&fdtab, f);
		count_fallback(rc);
		return sock_kernel_connect(f, fd, a, l);
	} else {
		ferry_unlock();
		ferry_internal_enter();
		ses = mgmt_connect(ferry.mgmt, ferry.rpc, (struct sockaddr *)&dst, dlen,
				   ferry.cfg.connect_timeout_ms);
		ferry_internal_leave();
		if (ses < 0) {
			if (ses == -ETIMEDOUT || ses == -ECONNREFUSED)
				peercache_set_plain((struct sockaddr *)&dst, clock_now_ns());
			count_fallback(ses);
			return sock_kernel_connect(f, fd, a, l);
		}
		ferry_lock();
		peercache_set_session((struct sockaddr *)&dst, ses, rpc_session_token(ferry.rpc, ses));
		rc = sock_open_stream(sk, ses, &local, llen);
	}
	ferry_unlock();
	if (rc) {
		count_fallback(rc);
		return sock_kernel_connect(f, fd, a, l);
	}
	if (nonblock) {
		sk->nb_connect = true;
		return -EINPROGRESS;
	}
	rc = sock_wait(f, EPOLLOUT, UINT64_MAX, -1, 0);
	if (rc < 0)
		return rc; /* -EINTR: the connect goes on, as the kernel's does */
	ferry_lock();
	struct stream *s = sk->stream;
	/* Taken, then ended before this thread ran again (the peer wrote,
	 * closed and left): the connect itself succeeded, as the kernel's does
	 * at the SYN-ACK, and reads tell the rest. */
	if (s->state == STREAM_FAILED && !s->established)
		rc = s->err ? -stream_take_error(s) : -ECONNREFUSED;
	ferry_unlock();
	return rc;
}

/* --- listen and accept --- */

static void sa_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)(void *)sa)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)(void *)sa)->sin6_port = htons(port);
}

/*
 * A socket that asks for any port gets one whose UDP twin is free as well,
 * or a listener's rendezvous could not be answered (the kernel's pick is
 * often a port some process holds for UDP): the kernel picks a port for a
 * UDP socket, the placeholder binds the same number, and the UDP socket is
 * kept for the rendezvous. A few tries, then the kernel's own pick.
 */
static int sock_bind(struct ffile *f, int fd, const struct sockaddr *addr, socklen_t len)
{
	const struct libc_fns *c = libc();
	struct fsock *sk = f->priv;
	if (f->kind != FFILE_SOCK)
		return c->bind(fd, addr, len) == 0 ? 0 : -errno;
	sock_kernel_own(f, fd);
	if (addr && len >= sa_len(sk->domain) && len <= sizeof(struct sockaddr_storage) &&
	    addr->sa_family == sk->domain && sa_port(addr) == 0 && sk->rdv_fd < 0 &&
	    sk->state == FSOCK_NEW && ferry_state() == FERRY_ON) {
		struct sockaddr_storage a;
		memcpy(&a, addr, len);
		for (int i = 0; i < 8; i++) {
			uint16_t port;
			ferry_internal_enter();
			int u = mgmt_rendezvous_socket(addr, len, &port);
			ferry_internal_leave();
			if (u < 0)
				break;
			sa_set_port((struct sockaddr *)&a, port);
			if (c->bind(fd, (struct sockaddr *)&a, len) == 0) {
				sk->rdv_fd = u;
				sk->bound = true;
				return 0;
			}
			int err = errno;
			c->close(u);
			if (err != EADDRINUSE)
				break;
		}
	}
	if (c->bind(fd, addr, len) != 0)
		return -errno;
	sk->bound = true;
	return 0;
}

unsigned sock_listen_flags(int fd, int family)
{
	const struct libc_fns *c = libc();
	int reuse = 0, v6only = 0;
	socklen_t rl = sizeof(reuse), ol = sizeof(v6only);
	unsigned flags = c->getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &rl) == 0 && reuse
				 ? MGMT_LISTEN_REUSEPORT
				 : 0;
	if (family == AF_INET6 &&
	    c->getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &ol) == 0 && v6only)
		flags |= MGMT_LISTEN_V6ONLY;
	return flags;
}

static int sock_listen(struct ffile *f, int fd, int backlog)
{
	struct fsock *sk = f->priv;
	const struct libc_fns *c = libc();
	if (f->kind == FFILE_SOCK) {
		sock_kernel_own(f, fd);
		/* The placeholder of a stream is an unconnected socket the kernel
		 * would let listen: answer as for the connected socket it stands
		 * for. */
		ferry_lock();
		bool connected = sk->state == FSOCK_STREAM || sk->state == FSOCK_CONNECTING;
		ferry_unlock();
		if (connected)
			return -EINVAL;
		if (!sk->bound && sk->state == FSOCK_NEW && ferry_state() == FERRY_ON) {
			/* listen's autobind, done here so the port suits a rendezvous */
			struct sockaddr_storage any = {.ss_family = (sa_family_t)sk->domain};
			sock_bind(f, fd, (struct sockaddr *)&any, sa_len(sk->domain));
		}
	}
	if (c->listen(fd, backlog) != 0)
		return -errno;
	if (f->kind == FFILE_DEAD || ferry_state() != FERRY_ON)
		return 0;
	ferry_lock();
	enum fsock_state st = sk->state;
	if (st == FSOCK_LISTEN && sk->lis)
		sk->lis->backlog = backlog;
	sk->lis_backlog = backlog;
	ferry_unlock();
	if (st != FSOCK_NEW)
		return 0;
	ffile_notify(f, 0, 0); /* listening: readable once a connection waits */
	struct sockaddr_storage a;
	socklen_t alen = sizeof(a);
	if (c->getsockname(fd, (struct sockaddr *)&a, &alen) != 0)
		return 0;
	uint16_t port = sa_port((struct sockaddr *)&a);
	if (!preload_config_port_allowed(&ferry.pcfg, port)) {
		sock_handoff(f);
		return 0;
	}
	unsigned lflags = sock_listen_flags(fd, a.ss_family);
	ferry_internal_enter();
	int rc = mgmt_listen_fd(ferry.mgmt, ferry.rpc, (struct sockaddr *)&a, alen, sk->rdv_fd,
				lflags);
	sk->rdv_fd = -1;
	if (rc == 0)
		sk->lis_rdv = mgmt_listen_fd_number(ferry.mgmt, (struct sockaddr *)&a, alen);
	ferry_internal_leave();
	if (rc < 0) {
		ferry_log(FERRY_LOG_WARN,
			  "listener on port %u is not accelerated: its rendezvous port udp/%u %s",
			  port, port, rc == -EADDRINUSE ? "is taken" : strerror(-rc));
		stats_inc(ferry_stats()->listeners_plain);
		sock_handoff(f);
		return 0;
	}
	/* The kernel side is only ever polled: the application's blocking mode
	 * lives in the file's status (F_GETFL answers from it). */
	int fl = c->fcntl(fd, F_GETFL);
	if (fl >= 0)
		c->fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	ferry_lock();
	sk->lis = listener_add((struct sockaddr *)&a, alen, backlog, f);
	if (sk->lis) {
		sk->lis->v6only = lflags & MGMT_LISTEN_V6ONLY;
		sk->state = FSOCK_LISTEN;
		f->hybrid = true;
	}
	ferry_unlock();
	if (sk->lis) {
		stats_inc(ferry_stats()->listeners);
		epoll_file_hybrid(f); /* added to an epoll before listen() */
	}
	if (!sk->lis) {
		ferry_internal_enter();
		mgmt_unlisten(ferry.mgmt, (struct sockaddr *)&a, alen);
		ferry_internal_leave();
		sock_handoff(f);
	}
	return 0;
}

/* The number becomes its socket's own: the pooled placeholder behind it
 * (*h) goes, and the kernel gets the flags type asked for. */
static void sock_number_own(int fd, int *h, int type)
{
	if (*h < 0)
		return;
	libc()->close(*h);
	*h = -1;
	if (type & SOCK_NONBLOCK)
		libc()->fcntl(fd, F_SETFL, O_NONBLOCK);
}

/*
 * A number for a new ferry socket (socket(), an accepted stream): a
 * duplicate of a blank pooled socket, whose hidden descriptor goes in *h --
 * the application's own socket in every way the kernel shows until it keeps
 * state of it (sock_kernel_own), and no socket() or close() per connection --
 * or, the pool empty or descriptors short, a socket of its own (*h = -1).
 * Returns the number, or -1 with errno.
 */
static int sock_new_number(int domain, int type, int protocol, int *h)
{
	const struct libc_fns *c = libc();
	*h = phpool_take(domain);
	int fd = *h < 0 ? -1 : c->fcntl(*h, (type & SOCK_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
	if (fd < 0) {
		if (*h >= 0) {
			bool short_fds = errno == EMFILE;
			phpool_give(domain, *h);
			if (short_fds)
				sock_reclaim();
		}
		*h = -1;
		fd = c->socket(domain, type, protocol);
		if (fd < 0)
			return -1;
	}
	if (phpool_pressure(fd)) {
		sock_reclaim();
		sock_number_own(fd, h, type);
	}
	return fd;
}

/* The number an accepted connection gets, with its file (a reference):
 * the number, or -errno with nothing left open. */
static int sock_accept_number(const struct fsock *lsk, int flags, struct ffile **out)
{
	const struct libc_fns *c = libc();
	int h;
	int nfd = sock_new_number(lsk->domain, SOCK_STREAM | (flags & (SOCK_CLOEXEC | SOCK_NONBLOCK)),
				  0, &h);
	int rc = nfd < 0 ? -errno : sock_adopt(nfd, lsk->domain, flags, h);
	*out = rc == 0 ? fdtable_get(&fdtab, nfd) : NULL;
	if (*out)
		return nfd;
	if (nfd >= 0)
		c->close(nfd);
	if (h >= 0)
		c->close(h);
	return rc ? rc : -ENOMEM;
}

static int sock_accepted(struct fsock *lsk, struct stream *s, struct sockaddr *addr,
			 socklen_t *alen, int flags)
{
	struct ffile *nf;
	int nfd = sock_accept_number(lsk, flags, &nf);
	if (nfd < 0) {
		ferry_lock();
		stream_close(ferry.rpc, s);
		ferry_unlock();
		return nfd;
	}
	struct fsock *sk = nf->priv;
	ferry_lock();
	sk->state = FSOCK_STREAM;
	sk->stream = s;
	stream_set_file(s, nf);
	ferry_unlock();
	copy_addr_out(&s->peer, s->peer_len, addr, alen);
	ffile_put(&fdtab, nf);
	return nfd;
}

/* A connection another process queued and offered (lshare.h): a new
 * number whose stream that process hands over at first use. */
static int sock_accepted_offer(struct fsock *lsk, const struct mgmt_offer *o,
			       struct sockaddr *addr, socklen_t *alen, int flags)
{
	struct ffile *nf;
	int nfd = sock_accept_number(lsk, flags, &nf);
	if (nfd < 0)
		return nfd;
	struct fsock *sk = nf->priv;
	sk->state = FSOCK_REMOTE;
	sk->remote_pid = (pid_t)o->pid;
	sk->remote_sid = o->sid;
	sk->remote_peer_sid = o->peer_sid;
	sk->remote_token = o->token;
	__atomic_store_n(&nf->mask, 0, __ATOMIC_RELEASE);
	/* Taken over now: its peer's address is known only then, and the
	 * application may ask at once (getpeername, accept's addr). */
	handover_adopt(nf);
	if (nf->kind != FFILE_SOCK || sk->state != FSOCK_STREAM) {
		ffile_put(&fdtab, nf);
		close(nfd);
		return -ECONNABORTED; /* as the kernel's for a connection reset in the queue */
	}
	ferry_lock();
	if (sk->stream)
		copy_addr_out(&sk->stream->peer, sk->stream->peer_len, addr, alen);
	ferry_unlock();
	ffile_put(&fdtab, nf);
	return nfd;
}

static int sock_accept_wait(struct ffile *f, int fd, struct sockaddr *addr, socklen_t *alen,
			    int flags);

static int sock_accept(struct ffile *f, int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	struct fsock *sk = f->priv;
	const struct libc_fns *c = libc();
	if (f->kind == FFILE_DEAD || sk->state != FSOCK_LISTEN) {
		int r = c->accept4(fd, addr, alen, flags);
		return r >= 0 ? r : -errno;
	}
	__atomic_add_fetch(&sk->lis_waiters, 1, __ATOMIC_SEQ_CST);
	lshare_interest(f);
	int rc = sock_accept_wait(f, fd, addr, alen, flags);
	__atomic_sub_fetch(&sk->lis_waiters, 1, __ATOMIC_SEQ_CST);
	return rc;
}

static int sock_accept_wait(struct ffile *f, int fd, struct sockaddr *addr, socklen_t *alen,
			    int flags)
{
	struct fsock *sk = f->priv;
	const struct libc_fns *c = libc();
	uint64_t deadline = sock_deadline(sk->rcvtimeo_ns);
	for (;;) {
		ferry_lock();
		struct stream *s = sk->lis ? listener_pop(sk->lis) : NULL;
		struct mgmt_offer o;
		bool offered = !s && sk->lis && listener_offer_pop(sk->lis, &o);
		ferry_unlock();
		if (s)
			return sock_accepted(sk, s, addr, alen, flags);
		if (offered) {
			int nfd = sock_accepted_offer(sk, &o, addr, alen, flags);
			if (nfd != -ECONNABORTED)
				return nfd;
			continue;
		}
		int r = c->accept4(fd, addr, alen, flags);
		if (r >= 0) {
			stats_inc(ferry_stats()->kernel_accepts);
			return r;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		if (ffile_nonblock(f))
			return -EAGAIN;
		int rc = sock_wait(f, EPOLLIN, deadline, fd, POLLIN);
		if (rc == -EINTR && !sk->rcvtimeo_ns && wait_signals_restart())
			continue;
		if (rc < 0)
			return rc;
	}
}

/* --- the libc edge --- */

FERRY_EXPORT int socket(int domain, int type, int protocol)
{
	const struct libc_fns *c = libc();
	if (!sock_eligible(domain, type, protocol) || ferry_internal() || !ferry_up())
		return c->socket(domain, type, protocol);
	bool plain_flags = (type & ~(0xf | SOCK_CLOEXEC | SOCK_NONBLOCK)) == 0;
	int h = -1;
	int fd = plain_flags ? sock_new_number(domain, type, protocol, &h)
			     : c->socket(domain, type, protocol); /* the kernel's EINVAL */
	if (fd < 0)
		return fd;
	if (sock_adopt(fd, domain, type, h) != 0) {
		stats_inc(ferry_stats()->fallback_unsupported);
		sock_number_own(fd, &h, type); /* a plain kernel socket now */
	}
	return fd;
}

FERRY_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
	return libc()->socketpair(domain, type, protocol, sv);
}

FERRY_EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	/* The placeholder is the real socket: the kernel reserves the port. */
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return libc()->bind(fd, addr, len);
	struct ffile *f = sock_get(fd);
	if (!f)
		return libc()->bind(fd, addr, len);
	int rc = sock_bind(f, fd, addr, len);
	ffile_put(&fdtab, f);
	return (int)ferry_ret(rc);
}

FERRY_EXPORT int listen(int fd, int backlog)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return libc()->listen(fd, backlog);
	struct ffile *f = sock_get(fd);
	if (!f)
		return libc()->listen(fd, backlog);
	int rc = sock_listen(f, fd, backlog);
	ffile_put(&fdtab, f);
	return (int)ferry_ret(rc);
}

FERRY_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return libc()->accept4(fd, addr, alen, flags);
	struct ffile *f = sock_get(fd);
	if (!f)
		return libc()->accept4(fd, addr, alen, flags);
	int rc = sock_accept(f, fd, addr, alen, flags);
	ffile_put(&fdtab, f);
	return (int)ferry_ret(rc);
}

FERRY_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *alen)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return libc()->accept(fd, addr, alen);
	return accept4(fd, addr, alen, 0);
}

/* A TCP connect while ferry could not start: counted, so the counters say
 * why nothing was carried. Only then is the socket's type asked. */
static void count_unavailable(int fd, const struct sockaddr *addr)
{
	int type = 0;
	socklen_t tl = sizeof(type);
	if (addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6) &&
	    libc()->getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM) {
		stats_inc(ferry_stats()->fallbacks);
		stats_inc(ferry_stats()->fallback_unavailable);
	}
}

FERRY_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal()) {
		if (__builtin_expect(ferry.unavailable, 0) && !ferry_internal())
			count_unavailable(fd, addr);
		return libc()->connect(fd, addr, len);
	}
	struct ffile *f = sock_get(fd);
	if (!f)
		return libc()->connect(fd, addr, len);
	int rc = sock_connect(f, fd, addr, len);
	ffile_put(&fdtab, f);
	return (int)ferry_ret(rc);
}

FERRY_EXPORT int shutdown(int fd, int how)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return libc()->shutdown(fd, how);
	struct ffile *f = sock_get(fd);
	if (!f)
		return libc()->shutdown(fd, how);
	struct fsock *sk = f->priv;
	int rc = 1;
	bool fresh = false;
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
		rc = -EINVAL;
	} else if (f->kind == FFILE_SOCK) {
		ferry_lock();
		if (sk->state == FSOCK_STREAM) {
			rc = stream_shutdown(ferry.rpc, sk->stream, how);
		}
		fresh = sk->state == FSOCK_NEW;
		ferry_unlock();
	}
	if (rc == 1) {
		sock_kernel_own(f, fd);
		rc = libc()->shutdown(fd, how) == 0 ? 0 : -errno;
		/* An unconnected socket says ENOTCONN but is shut all the same
		 * (inet_shutdown): shut for reading, tcp_poll finds it readable
		 * at EOF as well as writable and hung up (sock_adopt's mask). */
		if (fresh && how != SHUT_WR)
			ffile_notify(f, EPOLLIN | EPOLLOUT | EPOLLHUP | EPOLLRDHUP, EPOLLIN | EPOLLRDHUP);
	}
	ffile_put(&fdtab, f);
	return (int)ferry_ret(rc);
}

FERRY_EXPORT int close(int fd)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return libc()->close(fd);
	/* Out of the table first: once the kernel frees the number another
	 * thread may get it for something else (and a connect swapping this
	 * number onto another placeholder, sock_local, sees it gone). */
	struct ffile *f = fdtable_remove(&fdtab, fd);
	int rc = libc()->close(fd);
	int saved = errno;
	if (f)
		ffile_put(&fdtab, f);
	errno = saved;
	return rc;
}

#ifdef HAVE_CLOSE_RANGE
FERRY_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	const struct libc_fns *c = libc();
	if (!c->close_range) {
		errno = ENOSYS;
		return -1;
	}
	if (ferry_internal() || (flags & CLOSE_RANGE_CLOEXEC) || first > last)
		return c->close_range(first, last, flags);
	size_t end = last < fdtab.size ? last + 1 : fdtab.size;
	struct ffile *batch[64];
	unsigned n = 0;
	int rc = 0, saved = 0;
	for (size_t fd = first; fd < end; fd++) {
		if (!fdtable_maybe(&fdtab, (int)fd))
			continue;
		struct ffile *f = fdtable_remove(&fdtab, (int)fd);
		if (!f)
			continue;
		if (n == 64) {
			for (unsigned i = 0; i < n; i++)
				ffile_put(&fdtab, batch[i]);
			n = 0;
		}
		batch[n++] = f;
	}
	rc = c->close_range(first, last, flags);
	saved = errno;
	for (unsigned i = 0; i < n; i++)
		ffile_put(&fdtab, batch[i]);
	errno = saved;
	return rc;
}
#endif

FERRY_EXPORT int getsockname(int fd, struct sockaddr *addr, socklen_t *alen)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return libc()->getsockname(fd, addr, alen);
	struct ffile *f = sock_get(fd);
	bool done = false;
	if (f && f->kind == FFILE_SOCK) {
		struct fsock *sk = f->priv;
		ferry_lock();
		if (sk->state == FSOCK_STREAM && sk->stream->local_len) {
			copy_addr_out(&sk->stream->local, sk->stream->local_len, addr, alen);
			done = true;
		}
		ferry_unlock();
	}
	if (f)
		ffile_put(&fdtab, f);
	return done ? 0 : libc()->getsockname(fd, addr, alen);
}

FERRY_EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *alen)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return libc()->getpeername(fd, addr, alen);
	struct ffile *f = sock_get(fd);
	int rc = 1;
	if (f && f->kind == FFILE_SOCK) {
		struct fsock *sk = f->priv;
		ferry_lock();
		if (sk->state == FSOCK_STREAM && sk->stream->state == STREAM_OPEN) {
			copy_addr_out(&sk->stream->peer, sk->stream->peer_len, addr, alen);
			rc = 0;
		} else if (sk->state == FSOCK_STREAM || sk->state == FSOCK_CONNECTING) {
			rc = -ENOTCONN;
		}
		ferry_unlock();
	}
	if (f)
		ffile_put(&fdtab, f);
	if (rc == 1)
		return libc()->getpeername(fd, addr, alen);
	return (int)ferry_ret(rc);
}

static int sock_tcp_info(struct fsock *sk, void *val, socklen_t *len)
{
	struct tcp_info ti;
	memset(&ti, 0, sizeof(ti));
	struct stream *s = sk->stream;
	if (s->state == STREAM_OPENING)
		ti.tcpi_state = TCP_SYN_SENT;
	else if (s->state == STREAM_FAILED)
		ti.tcpi_state = TCP_CLOSE;
	else if (s->rx_fin && s->wr_shut)
		ti.tcpi_state = TCP_LAST_ACK;
	else if (s->rx_fin)
		ti.tcpi_state = TCP_CLOSE_WAIT;
	else if (s->wr_shut)
		ti.tcpi_state = TCP_FIN_WAIT1;
	else
		ti.tcpi_state = TCP_ESTABLISHED;
	ti.tcpi_rcv_space = s->rx.cap;
	ti.tcpi_snd_mss = 1448;
	ti.tcpi_rcv_mss = 1448;
	ti.tcpi_unacked = (uint32_t)(stream_tx_queued(s) / 1448);
	socklen_t n = *len < sizeof(ti) ? *len : sizeof(ti);
	memcpy(val, &ti, n);
	*len = n;
	return 0;
}

/*
 * Options a server sets on every accepted connection (redis: TCP_NODELAY
 * and the keepalive four), answered for streams without the kernel: each
 * would be a system call per connection on the placeholder, which carries
 * no traffic. Ranges as the kernel checks them (tcp.h MAX_TCP_KEEP*).
 */
static const struct {
	int level, name, lo, hi;
	bool boolean;
} sock_opt_table[5] = {
	{IPPROTO_TCP, TCP_NODELAY, INT_MIN, INT_MAX, true},
	{SOL_SOCKET, SO_KEEPALIVE, INT_MIN, INT_MAX, true},
	{IPPROTO_TCP, TCP_KEEPIDLE, 1, 32767, false},
	{IPPROTO_TCP, TCP_KEEPINTVL, 1, 32767, false},
	{IPPROTO_TCP, TCP_KEEPCNT, 1, 127, false},
};

static int sock_opt_index(int level, int name)
{
	for (int i = 0; i < 5; i++)
		if (sock_opt_table[i].level == level && sock_opt_table[i].name == name)
			return i;
	return -1;
}

FERRY_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return libc()->getsockopt(fd, level, name, val, len);
	struct ffile *f = sock_get(fd);
	int rc = 1;
	if (f && f->kind == FFILE_SOCK && val && len) {
		struct fsock *sk = f->priv;
		ferry_lock();
		if (level == SOL_SOCKET && name == SO_ERROR && *len >= sizeof(int)) {
			int e = 0;
			if (sk->state == FSOCK_STREAM)
				e = stream_take_error(sk->stream);
			else if (sk->state == FSOCK_FAILED) {
				e = sk->so_error;
				sk->so_error = 0;
			}
			if (e || sk->state == FSOCK_STREAM || sk->state == FSOCK_CONNECTING ||
			    sk->state == FSOCK_FAILED) {
				*(int *)val = e;
				*len = sizeof(int);
				rc = 0;
			}
		} else if (level == IPPROTO_TCP && name == TCP_INFO && sk->state == FSOCK_STREAM) {
			rc = sock_tcp_info(sk, val, len);
		} else {
			int i = sock_opt_index(level, name);
			if (i >= 0 && (sk->opt_set & (1u << i)) && (int)*len >= 0) {
				/* As the kernel: an int, truncated to the length asked. */
				socklen_t n = *len < sizeof(int) ? *len : sizeof(int);
				memcpy(val, &sk->opt_val[i], n);
				*len = n;
				rc = 0;
			}
		}
		ferry_unlock();
	}
	if (f)
		ffile_put(&fdtab, f);
	if (rc == 1)
		return libc()->getsockopt(fd, level, name, val, len);
	return (int)ferry_ret(rc);
}

static uint64_t timeval_ns(const void *val, socklen_t len)
{
	if (len < sizeof(struct timeval))
		return 0;
	const struct timeval *tv = val;
	return (uint64_t)tv->tv_sec * 1000000000ull + (uint64_t)tv->tv_usec * 1000ull;
}

/* 1: not a stream option kept here; else 0 or -errno. */
static int sock_setopt_stream(struct ffile *f, int level, int name, const void *val,
			      socklen_t len)
{
	int i = sock_opt_index(level, name);
	if (i < 0 || !val || f->kind != FFILE_SOCK)
		return 1;
	struct fsock *sk = f->priv;
	int rc = 1;
	ferry_lock();
	if (sk->state == FSOCK_STREAM) {
		int v = 0;
		if (len < sizeof(int)) {
			rc = -EINVAL;
		} else {
			memcpy(&v, val, sizeof(v));
			if (sock_opt_table[i].boolean)
				v = v != 0;
			rc = v < sock_opt_table[i].lo || v > sock_opt_table[i].hi ? -EINVAL : 0;
		}
		if (rc == 0) {
			sk->opt_val[i] = v;
			sk->opt_set |= (uint8_t)(1u << i);
		}
	}
	ferry_unlock();
	return rc;
}

/* Ferry notes the timeouts it must honour, once the kernel took them. */
static void sock_setopt_note(struct ffile *f, int level, int name, const void *val,
			     socklen_t len)
{
	if (f->kind != FFILE_SOCK || level != SOL_SOCKET)
		return;
	struct fsock *sk = f->priv;
	if (name == SO_RCVTIMEO)
		sk->rcvtimeo_ns = timeval_ns(val, len);
	else if (name == SO_SNDTIMEO)
		sk->sndtimeo_ns = timeval_ns(val, len);
	else if (name == SO_LINGER && len >= sizeof(struct linger))
		sk->linger0 = ((const struct linger *)val)->l_onoff &&
			      ((const struct linger *)val)->l_linger == 0;
}

FERRY_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct ffile *f = NULL;
	if (fdtable_maybe(&fdtab, fd) && !ferry_internal())
		f = sock_get(fd);
	if (!f)
		return libc()->setsockopt(fd, level, name, val, len);
	int rc = sock_setopt_stream(f, level, name, val, len);
	if (rc == 1) {
		/* The kernel keeps every other option on the placeholder, so
		 * getsockopt answers as it would. */
		sock_kernel_own(f, fd);
		rc = libc()->setsockopt(fd, level, name, val, len) == 0 ? 0 : -errno;
		if (rc == 0)
			sock_setopt_note(f, level, name, val, len);
	}
	ffile_put(&fdtab, f);
	return (int)ferry_ret(rc);
}

static void file_set_nonblock(struct ffile *f, bool on)
{
	int st = __atomic_load_n(&f->status, __ATOMIC_RELAXED);
	st = on ? st | O_NONBLOCK : st & ~O_NONBLOCK;
	__atomic_store_n(&f->status, st, __ATOMIC_RELAXED);
}

FERRY_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return libc()->ioctl(fd, req, arg);
	struct ffile *f = sock_get(fd);
	if (!f || f->kind != FFILE_SOCK)
		goto kernel;
	struct fsock *sk = f->priv;
	if (req == FIONBIO && arg) {
		file_set_nonblock(f, *(int *)arg != 0);
		__atomic_thread_fence(__ATOMIC_SEQ_CST); /* pairs with sock_let_go's */
		if (f->hybrid || sock_pooled_clean(sk)) {
			ffile_put(&fdtab, f);
			return 0; /* the kernel side stays non-blocking, or is pooled */
		}
		goto kernel;
	}
	if (req == FIOCLEX || req == FIONCLEX) {
		sk->cloexec_unknown = true;
		goto kernel;
	}
	if ((req == FIONREAD || req == SIOCOUTQ) && arg) {
		int v = -1;
		ferry_lock();
		if (sk->state == FSOCK_STREAM)
			v = (int)(req == FIONREAD ? rxbuf_avail(&sk->stream->rx)
						  : stream_tx_queued(sk->stream));
		ferry_unlock();
		if (v >= 0) {
			*(int *)arg = v;
			ffile_put(&fdtab, f);
			return 0;
		}
	}
	sock_kernel_own(f, fd);
kernel:
	if (f)
		ffile_put(&fdtab, f);
	return libc()->ioctl(fd, req, arg);
}

enum dup_kind { DUP_DUP, DUP_DUP2, DUP_DUP3, DUP_FCNTL };
struct dup_call {
	enum dup_kind kind;
	int oldfd, newfd, flags; /* newfd and flags: dup2, dup3 */
	int cmd;                 /* DUP_FCNTL: F_DUPFD or F_DUPFD_CLOEXEC, arg in flags */
};

static int dup_kernel(const struct dup_call *d)
{
	const struct libc_fns *c = libc();
	switch (d->kind) {
	case DUP_DUP:
		return c->dup(d->oldfd);
	case DUP_DUP2:
		return c->dup2(d->oldfd, d->newfd);
	case DUP_DUP3:
		return c->dup3(d->oldfd, d->newfd, d->flags);
	case DUP_FCNTL:
		break;
	}
	return c->fcntl(d->oldfd, d->cmd, (long)d->flags);
}

/*
 * A duplication, with the table following the kernel (the new number names
 * f, or nothing of ferry's when f is NULL). Under ph_lock, so sock_local
 * never swaps a socket's only number onto another placeholder while a
 * second number to the old one appears.
 */
static int dup_guarded(struct ffile *f, const struct dup_call *d)
{
	pthread_mutex_lock(&ph_lock);
	int rc = dup_kernel(d);
	int saved = errno;
	int newfd = d->kind == DUP_DUP2 || d->kind == DUP_DUP3 ? d->newfd : rc;
	struct ffile *stale = NULL;
	if (rc >= 0 && newfd != d->oldfd) {
		stale = fdtable_remove(&fdtab, newfd);
		if (f && fdtable_install(&fdtab, newfd, f) != 0)
			log_warn("fd %d is past the fd table; the duplicate is the kernel's", newfd);
		/* The new number's FD_CLOEXEC is not the first one's. */
		if (f && f->kind == FFILE_SOCK)
			((struct fsock *)f->priv)->cloexec_unknown = true;
	}
	pthread_mutex_unlock(&ph_lock);
	if (stale)
		ffile_put(&fdtab, stale);
	errno = saved;
	return rc;
}

static int fcntl_impl(int fd, int cmd, long arg)
{
	const struct libc_fns *c = libc();
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return c->fcntl(fd, cmd, arg);
	struct ffile *f = fdtable_get(&fdtab, fd);
	if (!f)
		return c->fcntl(fd, cmd, arg);
	int rc;
	switch (cmd) {
	case F_DUPFD:
	case F_DUPFD_CLOEXEC:
		rc = dup_guarded(f, &(struct dup_call){.kind = DUP_FCNTL, .oldfd = fd, .cmd = cmd,
							.flags = (int)arg});
		break;
	case F_GETFL:
		/* A socket's status is O_RDWR plus what F_SETFL set: kept here,
		 * so the common get-then-set costs no system call. */
		if (f->kind == FFILE_SOCK) {
			rc = __atomic_load_n(&f->status, __ATOMIC_RELAXED);
			break;
		}
		rc = c->fcntl(fd, cmd);
		break;
	case F_SETFL:
		if (f->kind == FFILE_SOCK) {
			int keep = O_APPEND | O_ASYNC | O_DIRECT | O_NOATIME | O_NONBLOCK;
			__atomic_store_n(&f->status, O_RDWR | ((int)arg & keep), __ATOMIC_RELAXED);
			/* A stream's placeholder is never used by the kernel; others
			 * (a socket that may still fall back, a listener) keep the
			 * kernel in step, a listener always non-blocking there. */
			struct fsock *sk = f->priv;
			if (__atomic_load_n(&sk->state, __ATOMIC_RELAXED) == FSOCK_STREAM) {
				rc = 0;
				break;
			}
			/* A pooled placeholder's flags wait in the status until the
			 * kernel owns it (sock_kernel_own); O_ASYNC and O_DIRECT are
			 * the kernel's to set up or refuse. */
			__atomic_thread_fence(__ATOMIC_SEQ_CST); /* pairs with sock_let_go's */
			if (sock_pooled_clean(sk) && !(arg & (O_ASYNC | O_DIRECT))) {
				rc = 0;
				break;
			}
			sock_kernel_own(f, fd);
		} else {
			file_set_nonblock(f, (arg & O_NONBLOCK) != 0);
		}
		rc = c->fcntl(fd, cmd, f->hybrid ? arg | O_NONBLOCK : arg);
		break;
	case F_SETFD:
		if (f->kind == FFILE_SOCK)
			((struct fsock *)f->priv)->cloexec_unknown = true;
		rc = c->fcntl(fd, cmd, arg);
		break;
	case F_GETFD:
	case F_GETOWN:
	case F_GETOWN_EX:
	case F_GETSIG:
	case F_GETLEASE:
	case F_GETLK:
	case F_OFD_GETLK:
		rc = c->fcntl(fd, cmd, arg);
		break;
	default:
		/* Whatever else sets up state in the kernel's file. */
		sock_kernel_own(f, fd);
		rc = c->fcntl(fd, cmd, arg);
	}
	int saved = errno;
	ffile_put(&fdtab, f);
	errno = saved;
	return rc;
}

FERRY_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	long arg = va_arg(ap, long);
	va_end(ap);
	return fcntl_impl(fd, cmd, arg);
}

FERRY_EXPORT int dup(int fd)
{
	const struct libc_fns *c = libc();
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return c->dup(fd);
	struct ffile *f = fdtable_get(&fdtab, fd);
	if (!f)
		return c->dup(fd);
	int nfd = dup_guarded(f, &(struct dup_call){.kind = DUP_DUP, .oldfd = fd});
	int saved = errno;
	ffile_put(&fdtab, f);
	errno = saved;
	return nfd;
}

static int dup3_impl(int oldfd, int newfd, int flags, bool is_dup2)
{
	const struct libc_fns *c = libc();
	if ((!fdtable_maybe(&fdtab, oldfd) && !fdtable_maybe(&fdtab, newfd)) || ferry_internal())
		return is_dup2 ? c->dup2(oldfd, newfd) : c->dup3(oldfd, newfd, flags);
	struct ffile *f = fdtable_get(&fdtab, oldfd);
	int rc = dup_guarded(f, &(struct dup_call){.kind = is_dup2 ? DUP_DUP2 : DUP_DUP3,
						   .oldfd = oldfd, .newfd = newfd, .flags = flags});
	int saved = errno;
	if (f)
		ffile_put(&fdtab, f);
	errno = saved;
	return rc;
}

FERRY_EXPORT int dup2(int oldfd, int newfd)
{
	return dup3_impl(oldfd, newfd, 0, true);
}

FERRY_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	return dup3_impl(oldfd, newfd, flags, false);
}
