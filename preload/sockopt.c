/* Socket options and ioctls: those a stream answers itself (TCP_INFO,
 * SO_ERROR, the options servers set on every connection, SO_OOBINLINE,
 * SO_ZEROCOPY, SO_RCVLOWAT, FIONREAD, SIOCATMARK), the rest on the
 * placeholder, where the kernel keeps and answers them. */
#include "autoconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "preload/export.h"
#include "preload/fasync.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/sock_internal.h"
#include "preload/stream.h"
#include "transport/sys.h"

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
 * no traffic. Ranges as the kernel checks them (tcp.h MAX_TCP_KEEP*). Set
 * on a socket before it connects or listens, the kernel keeps them and
 * they are noted here too: a stream takes them at connect, an accepted one
 * from its listener, as the kernel's sockets inherit them.
 */
enum {
	OPT_NODELAY,
	OPT_KEEPALIVE,
	OPT_KEEPIDLE,
	OPT_KEEPINTVL,
	OPT_KEEPCNT,
	OPT_USER_TIMEOUT,
	OPT_OOBINLINE,
	OPT_ZEROCOPY,
	OPT_RCVLOWAT,
};
static const struct {
	int level, name, lo, hi;
	bool boolean;
} sock_opt_table[SOCK_KEPT_OPTS] = {
	[OPT_NODELAY] = {IPPROTO_TCP, TCP_NODELAY, INT_MIN, INT_MAX, true},
	[OPT_KEEPALIVE] = {SOL_SOCKET, SO_KEEPALIVE, INT_MIN, INT_MAX, true},
	[OPT_KEEPIDLE] = {IPPROTO_TCP, TCP_KEEPIDLE, 1, 32767, false},
	[OPT_KEEPINTVL] = {IPPROTO_TCP, TCP_KEEPINTVL, 1, 32767, false},
	[OPT_KEEPCNT] = {IPPROTO_TCP, TCP_KEEPCNT, 1, 127, false},
	[OPT_USER_TIMEOUT] = {IPPROTO_TCP, TCP_USER_TIMEOUT, 0, INT_MAX, false},
	[OPT_OOBINLINE] = {SOL_SOCKET, SO_OOBINLINE, INT_MIN, INT_MAX, true},
	[OPT_ZEROCOPY] = {SOL_SOCKET, SO_ZEROCOPY, INT_MIN, INT_MAX, true},
	[OPT_RCVLOWAT] = {SOL_SOCKET, SO_RCVLOWAT, INT_MIN, INT_MAX, false},
};

/* The kernel's defaults for what a socket did not set (tcp(7)). */
static int sock_sysctl(const char *path, int fallback)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char buf[32];
	ssize_t n = fd < 0 ? -1 : sys()->read(fd, buf, sizeof(buf) - 1);
	if (fd >= 0)
		sys()->close(fd);
	if (n <= 0)
		return fallback;
	buf[n] = 0;
	int v = atoi(buf);
	return v > 0 ? v : fallback;
}

static int sock_opt(const struct fsock *sk, int i, int fallback)
{
	return (sk->opt_set & (1u << i)) ? sk->opt_val[i] : fallback;
}

void sock_apply_opts(struct fsock *sk)
{
	static int ka_time, ka_intvl, ka_probes; /* read once; under the endpoint lock */
	if (!sk->stream)
		return;
	sk->stream->urg_inline = sock_opt(sk, OPT_OOBINLINE, 0) != 0;
	stream_set_rcvlowat(sk->stream, (uint32_t)sock_opt(sk, OPT_RCVLOWAT, 1));
	if (!(sk->opt_set & ((1u << OPT_KEEPALIVE) | (1u << OPT_USER_TIMEOUT))))
		return;
	if (!ka_time) {
		ka_intvl = sock_sysctl("/proc/sys/net/ipv4/tcp_keepalive_intvl", 75);
		ka_probes = sock_sysctl("/proc/sys/net/ipv4/tcp_keepalive_probes", 9);
		ka_time = sock_sysctl("/proc/sys/net/ipv4/tcp_keepalive_time", 7200);
	}
	uint64_t idle = 0, wait = 0;
	if (sock_opt(sk, OPT_KEEPALIVE, 0)) {
		idle = (uint64_t)sock_opt(sk, OPT_KEEPIDLE, ka_time) * 1000000000ull;
		wait = (uint64_t)sock_opt(sk, OPT_KEEPINTVL, ka_intvl) *
		       (uint64_t)sock_opt(sk, OPT_KEEPCNT, ka_probes) * 1000000000ull;
	}
	stream_set_timeouts(sk->stream, idle, wait,
			    (uint64_t)sock_opt(sk, OPT_USER_TIMEOUT, 0) * 1000000ull);
}

bool sock_zerocopy(const struct fsock *sk)
{
	return sock_opt(sk, OPT_ZEROCOPY, 0) != 0;
}

static int sock_opt_index(int level, int name)
{
	for (int i = 0; i < SOCK_KEPT_OPTS; i++)
		if (sock_opt_table[i].level == level && sock_opt_table[i].name == name)
			return i;
	return -1;
}

FERRY_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct ffile *f = sock_peek(fd);
	int rc = 1;
	if (f && f->kind == FFILE_SOCK && val && len) {
		struct fsock *sk = f->priv;
		/* A fork child's copy of a stream its parent runs is asked before
		 * its ferry starts: its options are its own file's. */
		bool locked = ferry_state() == FERRY_ON;
		if (locked)
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
		if (locked)
			ferry_unlock();
	}
	if (f)
		ffile_put(&fdtab, f);
	if (rc == 1)
		return sys()->getsockopt(fd, level, name, val, len);
	return (int)ferry_ret(rc);
}

static uint64_t timeval_ns(const void *val, socklen_t len)
{
	if (len < sizeof(struct timeval))
		return 0;
	const struct timeval *tv = val;
	return (uint64_t)tv->tv_sec * 1000000000ull + (uint64_t)tv->tv_usec * 1000ull;
}

/* What the kernel keeps of v for option i: SO_RCVLOWAT as sock_setsockopt
 * and tcp_set_rcvlowat store it (negative: no limit; at most half of
 * tcp_rmem's largest buffer; at least 1). */
static int sock_opt_kept(int i, int v)
{
	static int rmem_max; /* read once; under the endpoint lock or before ferry runs */
	if (sock_opt_table[i].boolean)
		return v != 0;
	if (i != OPT_RCVLOWAT)
		return v;
	if (!rmem_max) {
		int fd = open("/proc/sys/net/ipv4/tcp_rmem", O_RDONLY | O_CLOEXEC);
		char buf[64];
		ssize_t n = fd < 0 ? -1 : sys()->read(fd, buf, sizeof(buf) - 1);
		if (fd >= 0)
			sys()->close(fd);
		long lo = 0, def = 0, max = 0;
		if (n > 0) {
			buf[n] = 0;
			sscanf(buf, "%ld %ld %ld", &lo, &def, &max);
		}
		rmem_max = max > 0 && max <= INT_MAX ? (int)max : 6291456;
	}
	if (v < 0 || v > rmem_max / 2)
		v = rmem_max / 2;
	return v ? v : 1;
}

/* 1: not a stream option kept here; else 0 or -errno. */
static int sock_setopt_stream(struct ffile *f, int level, int name, const void *val,
			      socklen_t len)
{
	int i = sock_opt_index(level, name);
	if (i < 0 || !val || f->kind != FFILE_SOCK)
		return 1;
	struct fsock *sk = f->priv;
	if (ferry_state() != FERRY_ON)
		return 1; /* no stream here yet: the option is its file's (sock_setopt_note) */
	int rc = 1;
	ferry_lock();
	if (sk->state == FSOCK_STREAM) {
		int v = 0;
		if (len < sizeof(int)) {
			rc = -EINVAL;
		} else {
			memcpy(&v, val, sizeof(v));
			rc = v < sock_opt_table[i].lo || v > sock_opt_table[i].hi ? -EINVAL : 0;
			v = sock_opt_kept(i, v);
		}
		if (rc == 0) {
			sk->opt_val[i] = v;
			sk->opt_set |= (uint16_t)(1u << i);
			sock_apply_opts(sk);
		}
	}
	ferry_unlock();
	return rc;
}

/* Ferry notes the timeouts it must honour, once the kernel took them. */
static void sock_setopt_note(struct ffile *f, int level, int name, const void *val,
			     socklen_t len)
{
	if (f->kind != FFILE_SOCK)
		return;
	struct fsock *sk = f->priv;
	int i = sock_opt_index(level, name);
	if (i >= 0 && val && len >= sizeof(int)) {
		/* The kernel took it; the stream this socket makes takes it too. */
		int v;
		memcpy(&v, val, sizeof(v));
		bool locked = ferry_state() == FERRY_ON;
		if (locked)
			ferry_lock();
		sk->opt_val[i] = sock_opt_kept(i, v);
		sk->opt_set |= (uint16_t)(1u << i);
		if (locked)
			ferry_unlock();
		return;
	}
	if (level != SOL_SOCKET)
		return;
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
	struct ffile *f = sock_peek(fd);
	if (!f)
		return sys()->setsockopt(fd, level, name, val, len);
	int rc = sock_setopt_stream(f, level, name, val, len);
	if (rc == 1) {
		/* The kernel keeps every other option on the placeholder, so
		 * getsockopt answers as it would. */
		sock_kernel_own(f, fd);
		rc = sys()->setsockopt(fd, level, name, val, len) == 0 ? 0 : -errno;
		if (rc == 0)
			sock_setopt_note(f, level, name, val, len);
	}
	return sock_done(f, rc);
}

/* glibc's asks the kernel by an internal call, past ours: the placeholder
 * would say "not at the mark" whatever the stream holds. */
FERRY_EXPORT int sockatmark(int fd)
{
	int v;
	return ioctl(fd, SIOCATMARK, &v) < 0 ? -1 : v;
}

FERRY_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	struct ffile *f = sock_file(fd);
	if (!f || f->kind != FFILE_SOCK)
		goto kernel;
	struct fsock *sk = f->priv;
	if (req == FIONBIO && arg) {
		ffile_set_nonblock(f, *(int *)arg != 0);
		__atomic_thread_fence(__ATOMIC_SEQ_CST); /* pairs with sock_let_go's */
		if (f->hybrid || sock_pooled_clean(sk)) {
			ffile_put(&fdtab, f);
			return 0; /* the kernel side stays non-blocking, or is pooled */
		}
		goto kernel;
	}
	if (req == FIOASYNC && arg) /* and the kernel's file too, below */
		fasync_set(f, fd, *(int *)arg != 0);
	if (req == FIOCLEX || req == FIONCLEX) {
		sk->cloexec_unknown = true;
		goto kernel;
	}
	if ((req == FIONREAD || req == SIOCOUTQ || req == SIOCATMARK) && arg) {
		int v = -1;
		ferry_lock();
		if (sk->state == FSOCK_STREAM) {
			if (req == SIOCATMARK)
				v = stream_at_mark(sk->stream);
			else
				v = (int)(req == FIONREAD ? stream_inq(sk->stream)
							  : stream_tx_queued(sk->stream));
		}
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
	return sys()->ioctl(fd, req, arg);
}
