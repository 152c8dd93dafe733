/* Resolution of the real libc functions behind the interposed names. */
#include "autoconfig.h"

#include "preload/libc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Stand-ins used only while dlsym runs (it may write diagnostics or close
 * files through us before the real pointers exist): raw system calls. */
static ssize_t raw_read(int fd, void *buf, size_t n)
{
	return syscall(SYS_read, fd, buf, n);
}
static ssize_t raw_write(int fd, const void *buf, size_t n)
{
	return syscall(SYS_write, fd, buf, n);
}
static int raw_close(int fd)
{
	return (int)syscall(SYS_close, fd);
}
static int raw_fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	long arg = va_arg(ap, long);
	va_end(ap);
	return (int)syscall(SYS_fcntl, fd, cmd, arg);
}

struct libc_fns libc_real = {
	.read = raw_read,
	.write = raw_write,
	.close = raw_close,
	.fcntl = raw_fcntl,
};
int libc_ready;
__thread int ferry_internal_depth __attribute__((tls_model("initial-exec")));

static pthread_once_t libc_once = PTHREAD_ONCE_INIT;
/* Set while this thread runs dlsym: dlsym may call back into interposed
 * functions (it can allocate, log, open files); those calls must not wait
 * on the pthread_once they are already inside. */
static __thread int libc_resolving;

#define RESOLVE(name) resolve_one((void **)&libc_real.name, #name)

static void resolve_one(void **slot, const char *name)
{
	void *fn = dlsym(RTLD_NEXT, name);
	if (fn)
		__atomic_store_n(slot, fn, __ATOMIC_RELEASE);
}

static void libc_resolve_once(void)
{
	libc_resolving = 1;
	RESOLVE(socket);
	RESOLVE(socketpair);
	RESOLVE(bind);
	RESOLVE(listen);
	RESOLVE(accept);
	RESOLVE(accept4);
	RESOLVE(connect);
	RESOLVE(shutdown);
	RESOLVE(close);
	RESOLVE(close_range);
	RESOLVE(read);
	RESOLVE(readv);
	RESOLVE(write);
	RESOLVE(writev);
	RESOLVE(recv);
	RESOLVE(recvfrom);
	RESOLVE(recvmsg);
	RESOLVE(recvmmsg);
	RESOLVE(send);
	RESOLVE(sendto);
	RESOLVE(sendmsg);
	RESOLVE(sendmmsg);
	RESOLVE(sendfile);
	RESOLVE(splice);
	RESOLVE(poll);
	RESOLVE(ppoll);
	RESOLVE(select);
	RESOLVE(pselect);
	RESOLVE(epoll_create);
	RESOLVE(epoll_create1);
	RESOLVE(epoll_ctl);
	RESOLVE(epoll_wait);
	RESOLVE(epoll_pwait);
	RESOLVE(epoll_pwait2);
	RESOLVE(fcntl);
	RESOLVE(ioctl);
	RESOLVE(getsockopt);
	RESOLVE(setsockopt);
	RESOLVE(getsockname);
	RESOLVE(getpeername);
	RESOLVE(dup);
	RESOLVE(dup2);
	RESOLVE(dup3);
	RESOLVE(fork);
	RESOLVE(daemon);
	RESOLVE(posix_spawn);
	RESOLVE(posix_spawnp);
	RESOLVE(system);
	RESOLVE(popen);
	RESOLVE(execve);
	RESOLVE(execvpe);
	libc_resolving = 0;
	__atomic_store_n(&libc_ready, 1, __ATOMIC_RELEASE);
}

void libc_resolve(void)
{
	if (libc_resolving)
		return;
	pthread_once(&libc_once, libc_resolve_once);
}

/* Resolve before main so the first interposed call pays nothing. */
__attribute__((constructor)) static void libc_constructor(void)
{
	libc_resolve();
}
