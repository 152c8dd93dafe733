/* Data calls on ferry streams. The vector forms do the work; read, recv,
 * write, send and the rest describe their buffers as iovecs and call them. */
#include "autoconfig.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/passfd.h"
#include "preload/reentry.h"
#include "preload/sock.h"
#include "preload/stream.h"
#include "preload/wait.h"
#include "transport/rpc.h"
#include "transport/sys.h"
#include "transport/txdefer.h"

#define IO_IOV_STACK 16
#define IO_BOUNCE (64u << 10)

static bool io_state_is_ferry(enum fsock_state state)
{
	return state == FSOCK_STREAM || state == FSOCK_CONNECTING || state == FSOCK_FAILED;
}

/*
 * Whether f's data calls are ferry's. Read without the endpoint lock: the
 * state of a socket with data moving is settled, and a stale answer is
 * caught under the lock by ferry_transfer, which sends the call to the
 * kernel (IO_GONE) if the socket is not ferry's after all.
 */
static bool io_is_ferry(struct ffile *f)
{
	struct fsock *sk = f->priv;
	return io_state_is_ferry(__atomic_load_n(&sk->state, __ATOMIC_RELAXED));
}

/* A private copy of iov that can be advanced past bytes already moved. */
struct iov_cursor {
	struct iovec *v;
	int n;
	struct iovec stack[IO_IOV_STACK];
};

static int cursor_init(struct iov_cursor *c, const struct iovec *iov, int n)
{
	if (n < 0 || n > IOV_MAX)
		return -EINVAL;
	c->v = n <= IO_IOV_STACK ? c->stack : malloc((size_t)n * sizeof(*iov));
	if (!c->v)
		return -ENOMEM;
	memcpy(c->v, iov, (size_t)n * sizeof(*iov));
	c->n = n;
	return 0;
}

static void cursor_advance(struct iov_cursor *c, size_t n)
{
	while (c->n && n >= c->v->iov_len) {
		n -= c->v->iov_len;
		c->v++;
		c->n--;
	}
	if (c->n && n) {
		c->v->iov_base = (uint8_t *)c->v->iov_base + n;
		c->v->iov_len -= n;
	}
}

static void cursor_free(struct iov_cursor *c, struct iovec *base)
{
	if (base != c->stack)
		free(base);
}

static size_t iov_total(const struct iovec *iov, int n)
{
	size_t t = 0;
	for (int i = 0; i < n; i++)
		t += iov[i].iov_len;
	return t;
}

/* Internal: the socket became the kernel's while we waited; redo the call
 * there. Never returned to the application. */
#define IO_GONE (-EXDEV)

/* io_stream_locked: a connect or the stream's OPEN is under way. */
#define IO_OPENING (-EINPROGRESS)

/* With the endpoint lock: sk's open stream in *out; IO_OPENING; IO_GONE;
 * or for a failed socket its pending error once, else no_stream_err
 * (ENOTCONN for a receive, EPIPE for a send, as the kernel answers). */
static int io_stream_locked(struct fsock *sk, int no_stream_err, struct stream **out)
{
	if (__atomic_load_n(&sk->kernel_gone, __ATOMIC_ACQUIRE) || !io_state_is_ferry(sk->state))
		return IO_GONE;
	if (sk->state == FSOCK_CONNECTING ||
	    (sk->state == FSOCK_STREAM && sk->stream->state == STREAM_OPENING))
		return IO_OPENING;
	if (sk->state == FSOCK_FAILED || !sk->stream) {
		int e = sk->so_error;
		sk->so_error = 0;
		return e ? -e : -no_stream_err;
	}
	*out = sk->stream;
	return 0;
}

/* One stream call for ferry_transfer: bytes, or -errno (-EAGAIN: none). */
static ssize_t io_step(struct stream *s, struct iov_cursor *cur, bool send, int flags)
{
	if (s->relayed)
		return -EAGAIN; /* a confined process's turn (stream.h) */
	if (send)
		return stream_send_flags(ferry.rpc, s, cur->v, cur->n, flags);
	return stream_recv(ferry.rpc, s, cur->v, cur->n, flags);
}

/*
 * A receive (send false) or a send on f's stream, waiting as the socket's
 * blocking mode, flags and SO_RCVTIMEO/SO_SNDTIMEO say: bytes, 0 at end of
 * stream, or -errno. Sends hold the socket's send lock throughout, so two
 * threads' writes never interleave.
 */
static ssize_t ferry_transfer(struct ffile *f, const struct iovec *iov, int iovcnt, int flags,
			      bool send)
{
	struct fsock *sk = f->priv;
	bool nonblock = ffile_nonblock(f) || (flags & MSG_DONTWAIT);
	uint64_t timeo_ns = send ? sk->sndtimeo_ns : sk->rcvtimeo_ns;
	uint64_t deadline = sock_deadline(timeo_ns);
	struct iov_cursor cur;
	int rc = cursor_init(&cur, iov, iovcnt);
	if (rc)
		return rc;
	struct iovec *base = cur.v;
	size_t want = iov_total(iov, iovcnt), done = 0;
	if (send && (nonblock ? pthread_mutex_trylock(&sk->send_lock) != 0
			      : pthread_mutex_lock(&sk->send_lock) != 0)) {
		cursor_free(&cur, base);
		return -EAGAIN; /* another thread is in the middle of a send */
	}
	int sflags = flags & (send ? MSG_OOB : MSG_PEEK | MSG_TRUNC);
	/* A send returns once some went without blocking; a receive waits for
	 * all only under MSG_WAITALL, and never to peek. */
	bool all = send ? !nonblock : (flags & MSG_WAITALL) && !(flags & MSG_PEEK);
	struct stream *s = NULL;
	ssize_t n;
	bool at_mark = false;
	/* SO_RCVLOWAT: a blocking read that finds fewer bytes than that, or
	 * than it asked for if less, takes nothing and waits until the mark's
	 * bytes are there, which the stream's readiness says (the kernel wakes
	 * its readers at the mark, whatever they asked). */
	bool lowat_wait = false;
	size_t lowat_need = 0;
	uint32_t wait_for = send ? EPOLLOUT : EPOLLIN | EPOLLRDHUP;
	for (;;) {
		/* One turn of the lock finds the stream and moves the bytes. */
		ferry_lock();
		n = s ? 0 : io_stream_locked(sk, send ? EPIPE : ENOTCONN, &s);
		if (n == 0 && !send) {
			lowat_wait = !nonblock && !(flags & MSG_PEEK) && done == 0 &&
				     s->rcvlowat > 1;
			lowat_need = s->rcvlowat < want ? s->rcvlowat : want;
		}
		if (n == 0 && want == 0 && !send) {
			ferry_unlock();
			break; /* as tcp_recvmsg: nothing asked, nothing waited for */
		}
		if (n == 0) {
			bool wait = lowat_wait && stream_read_short(s, lowat_need);
			n = wait ? -EAGAIN : io_step(s, &cur, send, sflags);
			if (n == -EAGAIN) {
				/* A blocking call waits next, and that wait sends
				 * what this thread queued (its last reply) first:
				 * sent now, it need not wait behind the poll. */
				if (!nonblock) {
					ferry_flush_locked();
					txdefer_flush();
				}
				if (send || !nonblock || !wait_miss_skips_look()) {
					stream_run_once(ferry.rpc);
					wait = lowat_wait && stream_read_short(s, lowat_need);
					n = wait ? -EAGAIN : io_step(s, &cur, send, sflags);
				}
			}
			/* As tcp_recvmsg: even MSG_WAITALL returns at the urgent mark. */
			at_mark = !send && n > 0 && stream_at_mark(s);
		}
		ferry_unlock(); /* DATA leaves at this thread's next wait */
		if (n > 0) {
			done += (size_t)n;
			if (!all || done >= want || at_mark)
				break;
			cursor_advance(&cur, (size_t)n);
			continue;
		}
		if (n == IO_OPENING)
			n = -EAGAIN;
		if (n != -EAGAIN || nonblock)
			break;
		/* An open under way is waited for as a connect is: writable. */
		n = sock_wait(f, s ? wait_for : EPOLLOUT, deadline, -1, 0);
		if (n == -EINTR && !timeo_ns && wait_signals_restart())
			n = 0;
		if (n < 0)
			break;
	}
	if (send && done && (flags & MSG_ZEROCOPY) && sock_zerocopy(sk)) {
		ferry_lock();
		stream_zerocopy_sent(s);
		ferry_unlock();
	}
	if (send)
		pthread_mutex_unlock(&sk->send_lock);
	cursor_free(&cur, base);
	if (done)
		return (ssize_t)done;
	if (send && n == -EPIPE)
		sock_sigpipe(flags);
	return n > 0 ? 0 : n;
}

/* recv with MSG_OOB: the urgent byte, at once or never (tcp_recv_urg). */
static ssize_t ferry_recv_oob(struct ffile *f, const struct iovec *iov, int iovcnt, int flags)
{
	struct fsock *sk = f->priv;
	struct stream *s = NULL;
	ferry_lock();
	ssize_t n = io_stream_locked(sk, ENOTCONN, &s);
	if (n == 0)
		n = stream_recv_oob(s, iov, iovcnt, flags);
	else if (n == IO_OPENING)
		n = -EINVAL; /* a connect under way has no urgent byte */
	ferry_unlock();
	return n;
}

static ssize_t ferry_recvv(struct ffile *f, const struct iovec *iov, int iovcnt, int flags)
{
	if (flags & MSG_OOB)
		return ferry_recv_oob(f, iov, iovcnt, flags);
	return ferry_transfer(f, iov, iovcnt, flags, false);
}

static ssize_t ferry_sendv(struct ffile *f, const struct iovec *iov, int iovcnt, int flags)
{
	return ferry_transfer(f, iov, iovcnt, flags, true);
}

/* The ferry file behind a data call on fd, or NULL when it is the kernel's. */
static struct ffile *io_file(int fd)
{
	struct ffile *f = sock_file(fd);
	if (!f)
		return NULL;
	if (f->kind == FFILE_DEAD)
		return f;
	if (!io_is_ferry(f)) {
		sock_kernel_own(f, fd); /* a send may connect (MSG_FASTOPEN) */
		ffile_put(&fdtab, f);
		return NULL;
	}
	return f;
}

static ssize_t io_recv(struct ffile *f, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	/* A fork child's copy of a stream: an error, never a hang. The reset
	 * is read once, then EOF, as from a kernel socket the peer reset. */
	ssize_t rc = f->kind != FFILE_DEAD ? ferry_recvv(f, iov, iovcnt, flags)
		     : __atomic_exchange_n(&f->reset_read, true, __ATOMIC_RELAXED) ? 0
										: -ECONNRESET;
	ffile_put(&fdtab, f);
	if (rc == IO_GONE) {
		struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
		return sys()->recvmsg(fd, &m, flags);
	}
	return ferry_ret(rc);
}

static ssize_t io_send(struct ffile *f, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t rc = f->kind == FFILE_DEAD ? -EPIPE : ferry_sendv(f, iov, iovcnt, flags);
	ffile_put(&fdtab, f);
	if (rc == IO_GONE) {
		struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
		return sys()->sendmsg(fd, &m, flags);
	}
	return ferry_ret(rc);
}

/* A receive with MSG_ERRQUEUE: the socket's error queue (zero-copy
 * notices), never its bytes; 0 with the notice in a control message, as
 * ip_recv_error and ipv6_recv_error give it, or EAGAIN when it is empty. */
static ssize_t io_recv_errqueue(struct ffile *f, int fd, struct msghdr *msg, int flags)
{
	struct fsock *sk = f->priv;
	struct stream *s = NULL;
	uint32_t lo = 0, hi = 0;
	ssize_t rc = -EAGAIN;
	if (f->kind != FFILE_DEAD) {
		ferry_lock();
		rc = io_stream_locked(sk, EAGAIN, &s);
		if (rc == 0 && !stream_zerocopy_take(s, &lo, &hi))
			rc = -EAGAIN;
		ferry_unlock();
	}
	bool v6 = f->kind != FFILE_DEAD && sk->domain == AF_INET6;
	ffile_put(&fdtab, f);
	if (rc == IO_GONE)
		return sys()->recvmsg(fd, msg, flags);
	if (rc < 0)
		return ferry_ret(-EAGAIN); /* an empty queue, whatever the socket's state */
	struct sock_extended_err ee = {.ee_origin = SO_EE_ORIGIN_ZEROCOPY,
				       .ee_code = SO_EE_CODE_ZEROCOPY_COPIED,
				       .ee_info = lo,
				       .ee_data = hi};
	/* The notice, then an offender address, all zero for this origin. */
	size_t len = sizeof(ee) + (v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
	msg->msg_namelen = 0;
	msg->msg_flags = MSG_ERRQUEUE;
	if (!msg->msg_control || msg->msg_controllen < CMSG_LEN(len)) {
		msg->msg_flags |= MSG_CTRUNC;
		msg->msg_controllen = 0;
		return 0;
	}
	struct cmsghdr *c = msg->msg_control;
	memset(c, 0, CMSG_LEN(len));
	c->cmsg_level = v6 ? SOL_IPV6 : SOL_IP;
	c->cmsg_type = v6 ? IPV6_RECVERR : IP_RECVERR;
	c->cmsg_len = CMSG_LEN(len);
	memcpy(CMSG_DATA(c), &ee, sizeof(ee));
	if (msg->msg_controllen > CMSG_SPACE(len))
		msg->msg_controllen = CMSG_SPACE(len);
	return 0;
}

FERRY_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	struct ffile *f = io_file(fd);
	if (!f)
		return sys()->readv(fd, iov, iovcnt);
	return io_recv(f, fd, iov, iovcnt, 0);
}

FERRY_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	struct ffile *f = io_file(fd);
	if (!f)
		return sys()->read(fd, buf, len);
	struct iovec v = {buf, len};
	return io_recv(f, fd, &v, 1, 0);
}

FERRY_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	struct ffile *f = io_file(fd);
	if (!f)
		return sys()->recv(fd, buf, len, flags);
	struct iovec v = {buf, len};
	if (flags & MSG_ERRQUEUE) {
		struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
		return io_recv_errqueue(f, fd, &m, flags);
	}
	return io_recv(f, fd, &v, 1, flags);
}

FERRY_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
			      socklen_t *alen)
{
	struct ffile *f = io_file(fd);
	if (!f)
		return sys()->recvfrom(fd, buf, len, flags, addr, alen);
	if (addr && alen)
		*alen = 0; /* a connected stream names no sender, as in TCP */
	struct iovec v = {buf, len};
	if (flags & MSG_ERRQUEUE) {
		struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
		return io_recv_errqueue(f, fd, &m, flags);
	}
	return io_recv(f, fd, &v, 1, flags);
}

FERRY_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct ffile *f = io_file(fd);
	if (!f) {
		ssize_t r = sys()->recvmsg(fd, msg, flags);
		if (r >= 0 && msg->msg_controllen)
			passfd_received(msg);
		return r;
	}
	if (msg->msg_iovlen > IOV_MAX) {
		ffile_put(&fdtab, f);
		errno = EMSGSIZE;
		return -1;
	}
	if (flags & MSG_ERRQUEUE)
		return io_recv_errqueue(f, fd, msg, flags);
	msg->msg_namelen = 0;
	msg->msg_controllen = 0;
	msg->msg_flags = 0;
	ssize_t r = io_recv(f, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
	if (r >= 0 && (flags & MSG_OOB))
		msg->msg_flags = r == 0 ? MSG_OOB | MSG_TRUNC : MSG_OOB; /* as tcp_recv_urg */
	return r;
}

FERRY_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct ffile *f = io_file(fd);
	if (!f)
		return sys()->writev(fd, iov, iovcnt);
	return io_send(f, fd, iov, iovcnt, 0);
}

FERRY_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	struct ffile *f = io_file(fd);
	if (!f)
		return sys()->write(fd, buf, len);
	struct iovec v = {(void *)buf, len};
	return io_send(f, fd, &v, 1, 0);
}

FERRY_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	struct ffile *f = io_file(fd);
	if (!f)
		return sys()->send(fd, buf, len, flags);
	struct iovec v = {(void *)buf, len};
	return io_send(f, fd, &v, 1, flags);
}

FERRY_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			    const struct sockaddr *addr, socklen_t alen)
{
	struct ffile *f = io_file(fd);
	if (!f)
		return sys()->sendto(fd, buf, len, flags, addr, alen);
	struct iovec v = {(void *)buf, len};
	return io_send(f, fd, &v, 1, flags); /* TCP ignores an address once connected */
}

FERRY_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct ffile *f = io_file(fd);
	if (!f) {
		if (msg && msg->msg_controllen && !ferry_internal())
			sock_passed(msg);
		return sys()->sendmsg(fd, msg, flags);
	}
	if (msg->msg_iovlen > IOV_MAX) {
		ffile_put(&fdtab, f);
		errno = EMSGSIZE;
		return -1;
	}
	return io_send(f, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

#ifdef HAVE_RECVMMSG
FERRY_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned n, int flags,
			  struct timespec *timeout)
{
	struct ffile *f = io_file(fd);
	if (!f) {
		int r = sys()->recvmmsg(fd, vec, n, flags, timeout);
		for (int i = 0; i < r; i++)
			if (vec[i].msg_hdr.msg_controllen)
				passfd_received(&vec[i].msg_hdr);
		return r;
	}
	ffile_put(&fdtab, f);
	unsigned i = 0;
	for (; i < n; i++) {
		ssize_t r = recvmsg(fd, &vec[i].msg_hdr, i ? flags | MSG_DONTWAIT : flags);
		if (r < 0)
			break;
		vec[i].msg_len = (unsigned)r;
		if (r == 0)
			break;
	}
	return i ? (int)i : -1;
}
#endif

#ifdef HAVE_SENDMMSG
FERRY_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned n, int flags)
{
	struct ffile *f = io_file(fd);
	if (!f) {
		for (unsigned i = 0; vec && i < n && !ferry_internal(); i++)
			if (vec[i].msg_hdr.msg_controllen)
				sock_passed(&vec[i].msg_hdr);
		return sys()->sendmmsg(fd, vec, n, flags);
	}
	ffile_put(&fdtab, f);
	unsigned i = 0;
	for (; i < n; i++) {
		ssize_t r = sendmsg(fd, &vec[i].msg_hdr, flags);
		if (r < 0)
			break;
		vec[i].msg_len = (unsigned)r;
	}
	return i ? (int)i : -1;
}
#endif

/* sendfile into a stream: through a bounce buffer, the file position
 * moved only past what the stream took. */
static ssize_t ferry_sendfile(struct ffile *f, int in_fd, off_t *offset, size_t count)
{
	const struct sys_fns *c = sys();
	uint8_t *buf = malloc(IO_BOUNCE);
	if (!buf)
		return -ENOMEM;
	off_t pos = offset ? *offset : lseek(in_fd, 0, SEEK_CUR);
	size_t done = 0;
	ssize_t rc = 0;
	while (done < count) {
		size_t want = count - done < IO_BOUNCE ? count - done : IO_BOUNCE;
		ssize_t r = pos >= 0 ? pread(in_fd, buf, want, pos) : c->read(in_fd, buf, want);
		if (r <= 0) {
			rc = r < 0 ? -errno : 0;
			break;
		}
		struct iovec v = {buf, (size_t)r};
		ssize_t w = ferry_sendv(f, &v, 1, done ? MSG_DONTWAIT : 0);
		if (w <= 0) {
			rc = w;
			break;
		}
		done += (size_t)w;
		if (pos >= 0)
			pos += w;
		if (w < r)
			break;
	}
	free(buf);
	if (offset)
		*offset = pos;
	else if (pos >= 0)
		lseek(in_fd, pos, SEEK_SET);
	if (done)
		return (ssize_t)done;
	if (rc == -EPIPE)
		sock_sigpipe(0);
	return rc;
}

FERRY_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	struct ffile *f = io_file(out_fd);
	if (!f)
		return sys()->sendfile(out_fd, in_fd, offset, count);
	ssize_t rc = f->kind == FFILE_DEAD ? -EPIPE : ferry_sendfile(f, in_fd, offset, count);
	ffile_put(&fdtab, f);
	return ferry_ret(rc);
}

/* splice with a stream at one end: peek, write what the other end takes,
 * consume exactly that, so nothing is lost when the pipe is full. */
static ssize_t ferry_splice(struct ffile *in, int fd_in, struct ffile *out, int fd_out, size_t len,
			    unsigned flags)
{
	const struct sys_fns *c = sys();
	size_t want = len < IO_BOUNCE ? len : IO_BOUNCE;
	uint8_t *buf = malloc(want ? want : 1);
	if (!buf)
		return -ENOMEM;
	int dw = (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0;
	ssize_t rc;
	struct iovec v = {buf, want};
	if (in) {
		rc = ferry_recvv(in, &v, 1, MSG_PEEK | dw);
		if (rc > 0) {
			ssize_t w = out ? ferry_sendv(out, &(struct iovec){buf, (size_t)rc}, 1, dw)
					: c->write(fd_out, buf, (size_t)rc);
			if (w < 0 && !out)
				w = -errno;
			if (w > 0) {
				struct iovec skip = {buf, (size_t)w};
				ferry_recvv(in, &skip, 1, MSG_DONTWAIT);
			}
			rc = w;
		}
	} else {
		rc = c->read(fd_in, buf, want);
		if (rc < 0)
			rc = -errno;
		else if (rc > 0) {
			v.iov_len = (size_t)rc;
			rc = ferry_sendv(out, &v, 1, 0);
		}
	}
	free(buf);
	return rc;
}

FERRY_EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			    unsigned flags)
{
	struct ffile *in = io_file(fd_in);
	struct ffile *out = io_file(fd_out);
	if (!in && !out)
		return sys()->splice(fd_in, off_in, fd_out, off_out, len, flags);
	ssize_t rc;
	if ((in && in->kind == FFILE_DEAD) || (out && out->kind == FFILE_DEAD))
		rc = -EPIPE;
	else if ((in && off_in) || (out && off_out))
		rc = -ESPIPE;
	else if (off_in || off_out)
		rc = -EINVAL; /* a pipe was expected at the other end */
	else
		rc = ferry_splice(in, fd_in, out, fd_out, len, flags);
	if (in)
		ffile_put(&fdtab, in);
	if (out)
		ffile_put(&fdtab, out);
	return ferry_ret(rc);
}
