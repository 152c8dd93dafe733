/* bind, listen and accept: a listener answers OPENs from other ferry
 * processes through its rendezvous port, and plain clients through the
 * kernel's listening socket beside it. */
#include "autoconfig.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "mgmt/mgmt.h"
#include "preload/epoll.h"
#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/handover.h"
#include "preload/inherit.h"
#include "preload/listener.h"
#include "preload/lshare.h"
#include "preload/reentry.h"
#include "preload/sock_internal.h"
#include "preload/sockaddr.h"
#include "preload/stream.h"
#include "preload/wait.h"
#include "transport/log.h"
#include "transport/stats.h"
#include "transport/sys.h"

/* --- listen and accept --- */

/*
 * A socket that asks for any port gets one whose UDP twin is free as well,
 * or a listener's rendezvous could not be answered (the kernel's pick is
 * often a port some process holds for UDP): the kernel picks a port for a
 * UDP socket, the placeholder binds the same number, and the UDP socket is
 * kept for the rendezvous. A few tries, then the kernel's own pick.
 */
static int sock_bind(struct ffile *f, int fd, const struct sockaddr *addr, socklen_t len)
{
	const struct sys_fns *c = sys();
	struct fsock *sk = f->priv;
	if (f->kind != FFILE_SOCK)
		return c->bind(fd, addr, len) == 0 ? 0 : -errno;
	sock_kernel_own(f, fd);
	if (addr && len >= sockaddr_len(sk->domain) && len <= sizeof(struct sockaddr_storage) &&
	    addr->sa_family == sk->domain && sockaddr_port(addr) == 0 && sk->rdv_fd < 0 &&
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
			sockaddr_set_port((struct sockaddr *)&a, port);
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
	const struct sys_fns *c = sys();
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
	const struct sys_fns *c = sys();
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
			sock_bind(f, fd, (struct sockaddr *)&any, sockaddr_len(sk->domain));
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
	uint16_t port = sockaddr_port((struct sockaddr *)&a);
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

/* The number an accepted connection gets, with its file (a reference):
 * the number, or -errno with nothing left open. */
static int sock_accept_number(const struct fsock *lsk, int flags, struct ffile **out)
{
	const struct sys_fns *c = sys();
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
	/* As the kernel's accepted sockets, it inherits the listener's. */
	sk->opt_set = lsk->opt_set;
	memcpy(sk->opt_val, lsk->opt_val, sizeof(sk->opt_val));
	sock_apply_opts(sk);
	stream_set_file(s, nf);
	ferry_unlock();
	sockaddr_copy_out(&s->peer, s->peer_len, addr, alen);
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
		sockaddr_copy_out(&sk->stream->peer, sk->stream->peer_len, addr, alen);
	ferry_unlock();
	ffile_put(&fdtab, nf);
	return nfd;
}

static int sock_accept_wait(struct ffile *f, int fd, struct sockaddr *addr, socklen_t *alen,
			    int flags);

static int sock_accept(struct ffile *f, int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	struct fsock *sk = f->priv;
	const struct sys_fns *c = sys();
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
	const struct sys_fns *c = sys();
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
		int rc = sock_wait(f, EPOLLIN | EPOLLERR, deadline, fd, POLLIN);
		if (rc == -EINTR && !sk->rcvtimeo_ns && wait_signals_restart())
			continue;
		if (rc < 0)
			return rc;
	}
}

FERRY_EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	/* The placeholder is the real socket: the kernel reserves the port. */
	struct ffile *f = sock_file(fd);
	return f ? sock_done(f, sock_bind(f, fd, addr, len)) : sys()->bind(fd, addr, len);
}

FERRY_EXPORT int listen(int fd, int backlog)
{
	struct ffile *f = sock_file(fd);
	if (f && f->kind != FFILE_DEAD)
		return sock_done(f, sock_listen(f, fd, backlog));
	if (f)
		ffile_put(&fdtab, f); /* a fork child's copy of a bound socket */
	if (sys()->listen(fd, backlog) != 0)
		return -1;
	if (ferry_internal())
		return 0;
	inherit_listen_foreign(fd, backlog);
	/* Answering at once: a process that listens means to accept, and a
	 * client that came before the rendezvous port was bound would have
	 * gone to the kernel. */
	f = sock_file(fd);
	if (f) {
		lshare_interest(f);
		ffile_put(&fdtab, f);
	}
	return 0;
}

FERRY_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	struct ffile *f = sock_file(fd);
	return f ? sock_done(f, sock_accept(f, fd, addr, alen, flags))
		 : sys()->accept4(fd, addr, alen, flags);
}

FERRY_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *alen)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return sys()->accept(fd, addr, alen);
	return accept4(fd, addr, alen, 0);
}
