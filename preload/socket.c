/* Socket calls: creation, the socket's life (its pooled placeholder, the
 * kernel taking it over), shutdown and addresses (close in close.c). connect is in
 * sock_connect.c, bind, listen and accept in sock_listen.c, options in
 * sockopt.c, descriptor flags and duplicates in fcntl.c. */
#include "autoconfig.h"

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "mgmt/mgmt.h"
#include "preload/epoll.h"
#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/handover.h"
#include "preload/listener.h"
#include "preload/lshare.h"
#include "preload/passfd.h"
#include "preload/phpool.h"
#include "preload/reentry.h"
#include "preload/sock_internal.h"
#include "preload/sockaddr.h"
#include "preload/stream.h"
#include "preload/wait.h"
#include "transport/clock.h"
#include "transport/log.h"
#include "transport/sys.h"

/* --- helpers shared with io.c --- */

/* fd's socket file (or a dead inherited one), referenced; NULL otherwise. */
static struct ffile *sock_lookup(int fd)
{
	struct ffile *f = fdtable_get(&fdtab, fd);
	if (f && f->kind != FFILE_SOCK && f->kind != FFILE_DEAD) {
		ffile_put(&fdtab, f);
		return NULL;
	}
	return f;
}

static bool sock_is_remote(const struct ffile *f)
{
	return f->kind == FFILE_SOCK && ((const struct fsock *)f->priv)->state == FSOCK_REMOTE;
}

struct ffile *sock_get(int fd)
{
	struct ffile *f = sock_lookup(fd);
	if (f && sock_is_remote(f))
		handover_adopt(f);
	return f;
}

struct ffile *sock_file(int fd)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return NULL;
	return sock_get(fd);
}

struct ffile *sock_peek(int fd)
{
	if (!fdtable_maybe(&fdtab, fd) || ferry_internal())
		return NULL;
	return sock_lookup(fd);
}

/* getsockname and getpeername of a stream another process runs: answered
 * from what the fork left (0), or, where it left nothing (passed or exec'd
 * copies), taken over so the stream answers (-1, as for any other file). */
static int sock_remote_addr(struct ffile *f, bool peer, struct sockaddr *addr, socklen_t *alen)
{
	if (!f || !sock_is_remote(f))
		return -1;
	const struct fsock *sk = f->priv;
	socklen_t len = peer ? sk->remote_peer_len : sk->remote_local_len;
	if (!len) {
		handover_adopt(f);
		return -1;
	}
	sockaddr_copy_out(peer ? &sk->remote_peer : &sk->remote_local, len, addr, alen);
	return 0;
}

int sock_done(struct ffile *f, int rc)
{
	ffile_put(&fdtab, f);
	return (int)ferry_ret(rc);
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
	want |= EPOLLHUP;
	wait_signal_begin();
	wait_flush();
	unsigned spin_us = wait_spin_us();
	if (spin_us) {
		uint64_t spin_end = clock_now_ns() + (uint64_t)spin_us * 1000u;
		for (unsigned i = 0; !wait_spin_over(i, spin_end); i++) {
			if (ffile_mask(f) & want) {
				wait_spin_outcome(true);
				return 0;
			}
			if (wait_signal_hit())
				return -EINTR;
			wait_spin_once();
		}
		wait_spin_outcome(false);
	}
	struct waiter *w = wait_self();
	struct wait_node node;
	for (;;) {
		if (ffile_mask(f) & want)
			return 0;
		if (clock_now_ns() >= deadline)
			return -EAGAIN;
		if (wait_signal_hit())
			return -EINTR;
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

/* --- lifecycle --- */

void sock_drop_rendezvous(struct fsock *sk)
{
	if (sk->rdv_fd >= 0)
		sys()->close(sk->rdv_fd);
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
			sys()->close(sk->ph_fd);
		else
			phpool_give(sk->domain, sk->ph_fd);
	}
	free(sk);
}

/* Makes fd's file ferry's socket; ph_fd is the pooled socket fd duplicates,
 * or -1. Returns 0 or -errno (fd stays plain, ph_fd untouched). */
int sock_adopt(int fd, int domain, int type, int ph_fd)
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
bool sock_pooled_clean(const struct fsock *sk)
{
	return __atomic_load_n(&sk->ph_fd, __ATOMIC_SEQ_CST) >= 0;
}

/* A pooled socket's kernel flags are a fresh socket's: ferry kept the
 * application's (F_SETFL, FIONBIO, SOCK_NONBLOCK) until the kernel owns it. */
static void sock_push_status(struct ffile *f, int fd)
{
	int st = __atomic_load_n(&f->status, __ATOMIC_RELAXED) & ~O_ACCMODE;
	if (st)
		sys()->fcntl(fd, F_SETFL, st);
}

pthread_mutex_t sock_ph_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * f's numbers become the only hold on its socket, the application's own
 * from now on: the hidden descriptor goes (the socket is never pooled
 * again), and the flags ferry kept reach the kernel (on fd, unless -1).
 * Under sock_ph_lock.
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
	sys()->close(h);
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
	pthread_mutex_lock(&sock_ph_lock); /* before the table's, as everywhere */
	fdtable_each(&fdtab, sock_let_go_each, NULL);
	pthread_mutex_unlock(&sock_ph_lock);
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
	pthread_mutex_lock(&sock_ph_lock);
	sock_let_go(f, fd);
	pthread_mutex_unlock(&sock_ph_lock);
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
void sock_handoff(struct ffile *f)
{
	struct fsock *sk = f->priv;
	sock_drop_rendezvous(sk);
	epoll_file_kernelize(f);
	__atomic_store_n(&sk->kernel_gone, true, __ATOMIC_RELEASE);
	__atomic_store_n(&f->gone, true, __ATOMIC_RELEASE);
	fdtable_forget_file(&fdtab, f);
	ffile_notify(f, EPOLLOUT | EPOLLIN, EPOLLOUT | EPOLLIN);
}

/* The number becomes its socket's own: the pooled placeholder behind it
 * (*h) goes, and the kernel gets the flags type asked for. */
void sock_number_own(int fd, int *h, int type)
{
	if (*h < 0)
		return;
	sys()->close(*h);
	*h = -1;
	if (type & SOCK_NONBLOCK)
		sys()->fcntl(fd, F_SETFL, O_NONBLOCK);
}

/*
 * A number for a new ferry socket (socket(), an accepted stream): a
 * duplicate of a blank pooled socket, whose hidden descriptor goes in *h --
 * the application's own socket in every way the kernel shows until it keeps
 * state of it (sock_kernel_own), and no socket() or close() per connection --
 * or, the pool empty or descriptors short, a socket of its own (*h = -1).
 * Returns the number, or -1 with errno.
 */
int sock_new_number(int domain, int type, int protocol, int *h)
{
	const struct sys_fns *c = sys();
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

/* --- the libc edge --- */

FERRY_EXPORT int socket(int domain, int type, int protocol)
{
	const struct sys_fns *c = sys();
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
	return sys()->socketpair(domain, type, protocol, sv);
}

FERRY_EXPORT int shutdown(int fd, int how)
{
	struct ffile *f = sock_file(fd);
	if (!f)
		return sys()->shutdown(fd, how);
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
		rc = sys()->shutdown(fd, how) == 0 ? 0 : -errno;
		/* An unconnected socket says ENOTCONN but is shut all the same
		 * (inet_shutdown): shut for reading, tcp_poll finds it readable
		 * at EOF as well as writable and hung up (sock_adopt's mask). */
		if (fresh && how != SHUT_WR)
			ffile_notify(f, EPOLLIN | EPOLLOUT | EPOLLHUP | EPOLLRDHUP, EPOLLIN | EPOLLRDHUP);
	}
	return sock_done(f, rc);
}

FERRY_EXPORT int getsockname(int fd, struct sockaddr *addr, socklen_t *alen)
{
	struct ffile *f = sock_peek(fd);
	if (sock_remote_addr(f, false, addr, alen) == 0)
		return sock_done(f, 0);
	bool done = false;
	if (f && f->kind == FFILE_SOCK) {
		struct fsock *sk = f->priv;
		ferry_lock();
		if (sk->state == FSOCK_STREAM && sk->stream->local_len) {
			sockaddr_copy_out(&sk->stream->local, sk->stream->local_len, addr, alen);
			done = true;
		}
		ferry_unlock();
	}
	if (f)
		ffile_put(&fdtab, f);
	return done ? 0 : sys()->getsockname(fd, addr, alen);
}

FERRY_EXPORT int getpeername(int fd, struct sockaddr *addr, socklen_t *alen)
{
	struct ffile *f = sock_peek(fd);
	if (sock_remote_addr(f, true, addr, alen) == 0)
		return sock_done(f, 0);
	int rc = 1;
	if (f && f->kind == FFILE_SOCK) {
		struct fsock *sk = f->priv;
		ferry_lock();
		/* Connected, or ended cleanly with the peer's socket gone: in
		 * CLOSE_WAIT the kernel still names the peer. */
		if (sk->state == FSOCK_STREAM &&
		    (sk->stream->state == STREAM_OPEN || sk->stream->write_draws_reset)) {
			sockaddr_copy_out(&sk->stream->peer, sk->stream->peer_len, addr, alen);
			rc = 0;
		} else if (sk->state == FSOCK_STREAM || sk->state == FSOCK_CONNECTING) {
			rc = -ENOTCONN;
		}
		ferry_unlock();
	}
	if (f)
		ffile_put(&fdtab, f);
	if (rc == 1)
		return sys()->getpeername(fd, addr, alen);
	return (int)ferry_ret(rc);
}
