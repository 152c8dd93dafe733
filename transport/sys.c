/* Resolution of the real libc functions, for every layer (see sys.h). */
#include "autoconfig.h"

#include "transport/sys.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Stand-ins used only while dlsym runs inside libferry.so (it may write
 * diagnostics or close files through the interposer before the real
 * pointers exist): raw system calls. */
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

struct sys_fns sys_table = {
	.read = raw_read,
	.write = raw_write,
	.close = raw_close,
	.fcntl = raw_fcntl,
};
int sys_ready;

/*
 * What each name binds to in this program, for a name RTLD_NEXT does not
 * find. Designated initialisers, so the compiler checks every prototype in
 * struct sys_fns against libc's. This file is the one object that may name
 * the interposed functions (tests/test_layering.sh); inside libferry.so
 * these addresses are preload's wrappers, which is why they are only the
 * fallback there (RTLD_NEXT always finds libc from libferry.so).
 */
static const struct sys_fns sys_plain = {
	.socket = socket,
	.socketpair = socketpair,
	.bind = bind,
	.listen = listen,
	.accept = accept,
	.accept4 = accept4,
	.connect = connect,
	.shutdown = shutdown,
	.close = close,
#ifdef HAVE_CLOSE_RANGE
	.close_range = close_range,
#endif
	.read = read,
	.readv = readv,
	.write = write,
	.writev = writev,
	.recv = recv,
	.recvfrom = recvfrom,
	.recvmsg = recvmsg,
#ifdef HAVE_RECVMMSG
	.recvmmsg = recvmmsg,
#endif
	.send = send,
	.sendto = sendto,
	.sendmsg = sendmsg,
#ifdef HAVE_SENDMMSG
	.sendmmsg = sendmmsg,
#endif
	.sendfile = sendfile,
	.splice = splice,
	.poll = poll,
	.ppoll = ppoll,
	.select = select,
	.pselect = pselect,
	.epoll_create = epoll_create,
	.epoll_create1 = epoll_create1,
	.epoll_ctl = epoll_ctl,
	.epoll_wait = epoll_wait,
	.epoll_pwait = epoll_pwait,
#ifdef HAVE_EPOLL_PWAIT2
	.epoll_pwait2 = epoll_pwait2,
#endif
	.fcntl = fcntl,
	.ioctl = ioctl,
	.getsockopt = getsockopt,
	.setsockopt = setsockopt,
	.getsockname = getsockname,
	.getpeername = getpeername,
	.dup = dup,
	.dup2 = dup2,
	.dup3 = dup3,
	.fork = fork,
	.daemon = daemon,
	.posix_spawn = posix_spawn,
	.posix_spawnp = posix_spawnp,
	.system = system,
	.execve = execve,
	.execvpe = execvpe,
	.popen = popen,
	.fdopen = fdopen,
	.prctl = prctl,
	.syscall = syscall,
	.sigaction = sigaction,
};

/* Every member of struct sys_fns by name, for dlsym. */
#define SYS_NAME(name) {#name, offsetof(struct sys_fns, name)}
static const struct sys_name {
	const char *name;
	size_t offset;
} sys_names[] = {
	SYS_NAME(socket),	 SYS_NAME(socketpair),	 SYS_NAME(bind),
	SYS_NAME(listen),	 SYS_NAME(accept),	 SYS_NAME(accept4),
	SYS_NAME(connect),	 SYS_NAME(shutdown),	 SYS_NAME(close),
	SYS_NAME(close_range),	 SYS_NAME(read),	 SYS_NAME(readv),
	SYS_NAME(write),	 SYS_NAME(writev),	 SYS_NAME(recv),
	SYS_NAME(recvfrom),	 SYS_NAME(recvmsg),	 SYS_NAME(recvmmsg),
	SYS_NAME(send),		 SYS_NAME(sendto),	 SYS_NAME(sendmsg),
	SYS_NAME(sendmmsg),	 SYS_NAME(sendfile),	 SYS_NAME(splice),
	SYS_NAME(poll),		 SYS_NAME(ppoll),	 SYS_NAME(select),
	SYS_NAME(pselect),	 SYS_NAME(epoll_create), SYS_NAME(epoll_create1),
	SYS_NAME(epoll_ctl),	 SYS_NAME(epoll_wait),	 SYS_NAME(epoll_pwait),
	SYS_NAME(epoll_pwait2),	 SYS_NAME(fcntl),	 SYS_NAME(ioctl),
	SYS_NAME(getsockopt),	 SYS_NAME(setsockopt),	 SYS_NAME(getsockname),
	SYS_NAME(getpeername),	 SYS_NAME(dup),		 SYS_NAME(dup2),
	SYS_NAME(dup3),		 SYS_NAME(fork),	 SYS_NAME(daemon),
	SYS_NAME(posix_spawn),	 SYS_NAME(posix_spawnp), SYS_NAME(system),
	SYS_NAME(execve),	 SYS_NAME(execvpe),	 SYS_NAME(popen),
	SYS_NAME(fdopen),	 SYS_NAME(prctl),	 SYS_NAME(syscall),
	SYS_NAME(sigaction),
};
/* A member added to struct sys_fns but not here would stay unresolved. */
_Static_assert(sizeof(sys_names) / sizeof(sys_names[0]) * sizeof(void (*)(void)) ==
		       sizeof(struct sys_fns),
	       "sys_names lists every member of struct sys_fns");

static pthread_once_t sys_once = PTHREAD_ONCE_INIT;
/* Set while this thread runs dlsym: dlsym may call back into interposed
 * functions (it can allocate, log, open files); those calls must not wait
 * on the pthread_once they are already inside. */
static __thread int sys_resolving;

static void sys_resolve_once(void)
{
	sys_resolving = 1;
	for (size_t i = 0; i < sizeof(sys_names) / sizeof(sys_names[0]); i++) {
		size_t off = sys_names[i].offset;
		void *fn = dlsym(RTLD_NEXT, sys_names[i].name);
		if (!fn)
			fn = *(void *const *)((const char *)&sys_plain + off);
		/* Published one by one: a call dlsym makes back into the
		 * interposer already finds the ones resolved before it. */
		__atomic_store_n((void **)((char *)&sys_table + off), fn, __ATOMIC_RELEASE);
	}
	sys_resolving = 0;
	__atomic_store_n(&sys_ready, 1, __ATOMIC_RELEASE);
}

void sys_resolve(void)
{
	if (sys_resolving)
		return;
	pthread_once(&sys_once, sys_resolve_once);
}

#define SYS_FD_FLOOR_MAX 65536

int sys_fd_floor_of(int limit)
{
	return limit / 2 < SYS_FD_FLOOR_MAX ? limit / 2 : SYS_FD_FLOOR_MAX;
}

int sys_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 256)
		return -1;
	return rl.rlim_cur > INT_MAX ? INT_MAX : (int)rl.rlim_cur;
}

int sys_fd_floor(void)
{
	int limit = sys_fd_limit();
	return limit < 0 ? -1 : sys_fd_floor_of(limit);
}

int sys_fd_hide(int fd)
{
	int floor = sys_fd_floor();
	if (fd < 0 || floor < 0 || fd >= floor)
		return fd;
	int high = sys()->fcntl(fd, F_DUPFD_CLOEXEC, floor);
	if (high < 0)
		return fd;
	sys()->close(fd);
	return high;
}
