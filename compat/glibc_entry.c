/*
 * glibc's fortified (_FORTIFY_SOURCE) and alias entry points, routed to the
 * interposed functions so ferry fds are handled whichever name a program or
 * library was linked against.
 *
 * Why these exist: inside glibc, __read_chk calls the internal __read, and
 * fcntl64 is the real body behind fcntl; none of them go through the public
 * symbol that preload/ defines, so without these a fortified memcached
 * (__poll_chk), libevent (__fdelt_chk via FD_SET) or redis (fcntl64) would
 * reach the kernel with a placeholder fd. Every Debian 12 binary we carry was
 * checked with `nm -D --undefined-only` (redis-server, redis-cli,
 * redis-benchmark, memcached, memcaslap, memcslap and their libraries:
 * libevent, libmemcached, libsystemd, libssl, libcrypto, libsasl2).
 *
 * Each bound check is glibc's own (glibc debug/read_chk.c and its siblings): same condition, same
 * __chk_fail, which glibc exports. The calls below use the public names, so
 * they bind to the first definition in the process: libferry's interposer
 * when it is loaded, libc otherwise.
 */
#include "autoconfig.h"

#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

/*
 * With 64-bit file offsets requested, glibc's headers redirect fcntl and
 * sendfile to fcntl64 and sendfile64, and the wrappers below would call
 * themselves.
 */
#if defined(__USE_FILE_OFFSET64) || defined(__USE_TIME_BITS64)
#error "compat/glibc_entry.c must be built without _FILE_OFFSET_BITS/_TIME_BITS=64"
#endif

/* glibc exports it (GLIBC_2.3.4) but declares it in no public header. */
extern void __chk_fail(void) __attribute__((noreturn));

#pragma GCC visibility push(default)

ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
		       struct sockaddr *addr, socklen_t *addrlen);
int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
		const sigset_t *ss, size_t fdslen);
long int __fdelt_chk(long int d);
long int __fdelt_warn(long int d);
int fcntl64(int fd, int cmd, ...);
ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count);

ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen)
{
	if (nbytes > buflen)
		__chk_fail();
	return read(fd, buf, nbytes);
}

ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	if (len > buflen)
		__chk_fail();
	return recv(fd, buf, len, flags);
}

ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
		       struct sockaddr *addr, socklen_t *addrlen)
{
	if (len > buflen)
		__chk_fail();
	return recvfrom(fd, buf, len, flags, addr, addrlen);
}

int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < nfds)
		__chk_fail();
	return poll(fds, nfds, timeout);
}

int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
		const sigset_t *ss, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < nfds)
		__chk_fail();
	return ppoll(fds, nfds, timeout, ss);
}

/*
 * FD_SET/FD_CLR/FD_ISSET's index check. No fd is touched, but defining it
 * keeps the bound identical to glibc's whichever object the program binds
 * to; ferry's placeholders are real fds, so the FD_SETSIZE limit is the
 * kernel's limit too.
 */
long int __fdelt_chk(long int d)
{
	if (d < 0 || d >= FD_SETSIZE)
		__chk_fail();
	return d / __NFDBITS;
}

/* glibc's alias, used when the index is known at compile time to be bad. */
long int __fdelt_warn(long int d)
{
	return __fdelt_chk(d);
}

/*
 * fcntl64 is the same function as fcntl on LP64 glibc (since 2.28). The third
 * argument is fetched as a pointer, as glibc does: on the ABIs we build for
 * an int and a pointer travel in the same register, and fcntl only looks at
 * the bits the command defines.
 */
int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return fcntl(fd, cmd, arg);
}

_Static_assert(sizeof(off64_t) == sizeof(off_t), "sendfile64 forwards to sendfile");

ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	return sendfile(out_fd, in_fd, (off_t *)offset, count);
}

#pragma GCC visibility pop
