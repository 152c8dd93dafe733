/* connect: a stream over a session to the peer's ferry, found by
 * rendezvous (or cached), else the kernel's connect, counted and said why. */
#include "autoconfig.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/epoll.h>

#include "mgmt/mgmt.h"
#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/localaddr.h"
#include "preload/peercache.h"
#include "preload/phpool.h"
#include "preload/reentry.h"
#include "preload/sock_internal.h"
#include "preload/sockaddr.h"
#include "preload/stream.h"
#include "transport/clock.h"
#include "transport/log.h"
#include "transport/rpc.h"
#include "transport/sys.h"

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
	return sys()->connect(fd, a, l) == 0 ? 0 : -errno;
}

/* A non-blocking connect that failed after the application had EINPROGRESS:
 * reported through SO_ERROR and readiness, as a failed kernel connect is. */
static void sock_connect_failed(struct ffile *f, int err)
{
	struct fsock *sk = f->priv;
	ferry_lock();
	sk->state = FSOCK_FAILED;
	sk->so_error = err;
	ferry_unlock();
	ffile_notify(f, EPOLLOUT | EPOLLERR | EPOLLHUP, EPOLLOUT | EPOLLERR | EPOLLHUP);
}

void sock_fallback_async(struct ffile *f)
{
	struct fsock *sk = f->priv;
	int fd;
	if (ffile_fds(&fdtab, f, &fd, 1) == 0)
		return; /* closed meanwhile */
	sock_kernel_own(f, fd);
	int rc = sys()->connect(fd, (struct sockaddr *)&sk->dst, sk->dst_len);
	if (rc != 0 && errno != EINPROGRESS) {
		sock_connect_failed(f, errno);
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
	sock_apply_opts(sk);
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
	const struct sys_fns *c = sys();
	*llen = sizeof(*local);
	struct sockaddr_storage src;
	socklen_t slen;
	int rc;
	if (sk->bound) {
		if (c->getsockname(fd, (struct sockaddr *)local, llen) != 0)
			return -errno;
		uint16_t port = sockaddr_port((struct sockaddr *)local);
		if (port != 0 && !sockaddr_is_any((struct sockaddr *)local))
			/* The kernel refuses a source that cannot reach dst
			 * (127.0.0.1 towards another host): so do we. */
			return localaddr_can_reach((struct sockaddr *)local, dst);
		if (port != 0) {
			/* Bound to the wildcard: the kernel takes the route's
			 * source at connect, and both ends see it. */
			rc = sock_source(sk, dst, &src, &slen);
			if (rc)
				return rc;
			sockaddr_set_port((struct sockaddr *)&src, port);
			memcpy(local, &src, slen);
			*llen = slen;
			return 0;
		}
	}
	rc = sock_source(sk, dst, &src, &slen);
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
	const struct sys_fns *c = sys();
	bool swapped = false;
	/* A first look; what counts is looked at again under the locks. */
	if (!sk->bound && sk->ph_fd >= 0 && !sk->ph_bound && !sk->cloexec_unknown) {
		struct sockaddr_storage src;
		socklen_t slen;
		int h = sock_source(sk, dst, &src, &slen);
		if (h == 0)
			h = phpool_take_bound(sk->domain, (struct sockaddr *)&src, slen, local, llen);
		if (h >= 0) {
			/* dup* hold sock_ph_lock across their kernel call and the table's
			 * update, and close takes the number out of the table under
			 * its lock: each comes wholly before the swap (and the number
			 * is not the only one any more) or after it. */
			int blank = -1;
			pthread_mutex_lock(&sock_ph_lock);
			pthread_mutex_lock(&fdtab.lock);
			if (sk->ph_fd >= 0 && !sk->cloexec_unknown && f->nfds == 1 &&
			    f->fds[0] == fd && c->dup3(h, fd, sk->cloexec ? O_CLOEXEC : 0) == fd) {
				blank = sk->ph_fd;
				sk->ph_fd = h;
				sk->ph_bound = true;
				swapped = true;
			}
			pthread_mutex_unlock(&fdtab.lock);
			pthread_mutex_unlock(&sock_ph_lock);
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

/* A live session to dst, or -1 for a rendezvous (with the connect flags
 * to give mgmt in *flags: see peercache_session). */
static int session_cached(const struct sockaddr *dst, unsigned *flags)
{
	uint64_t tok;
	bool another;
	int ses = peercache_session(dst, &tok, &another);
	*flags = another ? MGMT_CONNECT_ANOTHER : 0;
	if (ses >= 0 && !(rpc_session_is_up(ferry.rpc, ses) && rpc_session_token(ferry.rpc, ses) == tok)) {
		peercache_drop_session(dst, ses);
		ses = -1;
	}
	return ses;
}

/* A rendezvous with dst gave ses (endpoint lock held): recorded, and the
 * session whose turn it is taken, so the connections that waited on one
 * rendezvous are spread too (peercache_next). */
static int session_found(const struct sockaddr *dst, int ses)
{
	peercache_set_session(dst, ses, rpc_session_token(ferry.rpc, ses));
	uint64_t tok;
	int next = peercache_next(dst, &tok);
	if (next >= 0 && rpc_session_is_up(ferry.rpc, next) && rpc_session_token(ferry.rpc, next) == tok)
		return next;
	return ses;
}

/* A rendezvous with dst failed (endpoint lock held): a live session that
 * an earlier one found serves instead, else -1. A look for another process
 * may fail while the listener changes hands (nginx's reload), and the
 * destination is no less a ferry one for it. */
static int session_known(const struct sockaddr *dst)
{
	for (unsigned i = 0; i < PEERCACHE_HOLDERS; i++) {
		uint64_t tok;
		int s = peercache_next(dst, &tok);
		if (s < 0)
			return -1;
		if (rpc_session_is_up(ferry.rpc, s) && rpc_session_token(ferry.rpc, s) == tok)
			return s;
		peercache_drop_session(dst, s);
	}
	return -1;
}

static void sock_connect_done(void *ctx, int ses)
{
	struct ffile *f = ctx;
	struct fsock *sk = f->priv;
	ferry_internal_enter();
	ferry_lock();
	bool live = sk->state == FSOCK_CONNECTING;
	int rc = -ENOTCONN;
	if (live) {
		const struct sockaddr *dst = (struct sockaddr *)&sk->dst;
		int use = ses >= 0 ? session_found(dst, ses) : session_known(dst);
		if (use >= 0) {
			ses = use;
			rc = sock_open_stream(sk, use, &sk->src, sk->src_len);
		}
	}
	/* The handshake was called off because ferry is leaving (the exit
	 * drain forgot the endpoint, or mgmt went): the connect goes with the
	 * process, as one in SYN_SENT does. A kernel connect now would reach
	 * the server for nobody, and no fallback took place. */
	bool leaving = live && rc != 0 && ses == -ECANCELED;
	if (live && rc != 0 && !leaving)
		sk->state = FSOCK_NEW;
	ferry_unlock();
	if (leaving) {
		sock_connect_failed(f, ECONNABORTED);
	} else if (live && rc != 0) {
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
	const struct sys_fns *c = sys();
	if (f->kind == FFILE_DEAD || !a || (a->sa_family != AF_INET && a->sa_family != AF_INET6) ||
	    l < sockaddr_len(a->sa_family) || a->sa_family != sk->domain ||
	    l > sizeof(struct sockaddr_storage) || ferry_state() != FERRY_ON) {
		sock_kernel_own(f, fd);
		return c->connect(fd, a, l) == 0 ? 0 : -errno;
	}
	/* As the kernel reads it: the wildcard is this host. */
	struct sockaddr_storage to;
	memcpy(&to, a, l);
	sockaddr_any_to_loopback(&to);
	a = (const struct sockaddr *)&to;
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
	socklen_t dlen = sockaddr_unmap(a, &dst);
	uint16_t port = sockaddr_port(a);
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
	memcpy(&sk->src, &local, llen);
	sk->src_len = llen;
	bool nonblock = ffile_nonblock(f);

	ferry_lock();
	unsigned flags;
	int ses = session_cached((struct sockaddr *)&dst, &flags);
	if (ses >= 0) {
		rc = sock_open_stream(sk, ses, &local, llen);
	} else if (nonblock) {
		sk->state = FSOCK_CONNECTING;
		ffile_get(f);
		ferry_unlock();
		ferry_internal_enter();
		sk->nb_connect = true;
		rc = mgmt_connect_async_flags(ferry.mgmt, ferry.rpc, (struct sockaddr *)&dst, dlen,
					      ferry.cfg.connect_timeout_ms, flags, sock_connect_done,
					      f);
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
		ses = mgmt_connect_flags(ferry.mgmt, ferry.rpc, (struct sockaddr *)&dst, dlen,
					 ferry.cfg.connect_timeout_ms, flags);
		ferry_internal_leave();
		ferry_lock();
		int use = ses >= 0 ? session_found((struct sockaddr *)&dst, ses)
				   : session_known((struct sockaddr *)&dst);
		if (use < 0) {
			ferry_unlock();
			if (ses == -ETIMEDOUT || ses == -ECONNREFUSED)
				peercache_set_plain((struct sockaddr *)&dst, clock_now_ns());
			count_fallback(ses);
			return sock_kernel_connect(f, fd, a, l);
		}
		rc = sock_open_stream(sk, use, &local, llen);
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
	rc = sock_wait(f, EPOLLOUT | EPOLLERR, UINT64_MAX, -1, 0);
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

/* A TCP connect while ferry could not start: counted, so the counters say
 * why nothing was carried. Only then is the socket's type asked. */
static void count_unavailable(int fd, const struct sockaddr *addr)
{
	int type = 0;
	socklen_t tl = sizeof(type);
	if (addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6) &&
	    sys()->getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM) {
		stats_inc(ferry_stats()->fallbacks);
		stats_inc(ferry_stats()->fallback_unavailable);
	}
}

FERRY_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal()) {
		if (__builtin_expect(ferry.unavailable, 0) && !ferry_internal())
			count_unavailable(fd, addr);
		return sys()->connect(fd, addr, len);
	}
	struct ffile *f = sock_get(fd);
	return f ? sock_done(f, sock_connect(f, fd, addr, len)) : sys()->connect(fd, addr, len);
}
