/*
 * syscall(3): the raw system calls ferry must see.
 * - A seccomp filter loaded the way libseccomp loads it (SYS_seccomp) is
 *   watched as prctl is (sandbox.h).
 * - A descriptor closed with SYS_close or SYS_close_range leaves ferry's
 *   table as through close (close.h). libuv, and so node, closes every
 *   descriptor this way: without it a closed connection was never ended
 *   for its peer, and its stale number hid the next socket the kernel gave
 *   that number (node's cluster workers took one connection each).
 * - SYS_unshare and SYS_setns forget the namespaces read, as unshare and
 *   setns do (namespace.c).
 * Everything passes on as the raw system call it is, not through libc's
 * syscall(): ferry's own raw calls (sys.c) come here too, some while dlsym
 * runs, when nothing could be resolved, and a sanitizer's runtime sets
 * limits here before its shadow memory exists: not instrumented.
 */
#include "autoconfig.h"

#if defined(__x86_64__) || defined(__aarch64__)

#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/close.h"
#include "preload/export.h"
#include "preload/sandbox.h"
#include "transport/procinfo.h"

#define SYSCALL_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined")))

SYSCALL_UNINSTRUMENTED
static long raw_syscall(long nr, long a1, long a2, long a3, long a4, long a5, long a6)
{
	long ret;
#if defined(__x86_64__)
	register long r10 __asm__("r10") = a4;
	register long r8 __asm__("r8") = a5;
	register long r9 __asm__("r9") = a6;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
#else
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a1;
	register long x1 __asm__("x1") = a2;
	register long x2 __asm__("x2") = a3;
	register long x3 __asm__("x3") = a4;
	register long x4 __asm__("x4") = a5;
	register long x5 __asm__("x5") = a6;
	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory", "cc");
	ret = x0;
#endif
	if (ret < 0 && ret > -4096) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}

static int raw_close(int fd)
{
	return (int)raw_syscall(SYS_close, fd, 0, 0, 0, 0, 0);
}

#ifdef SYS_close_range
static int raw_close_range(unsigned first, unsigned last, int flags)
{
	return (int)raw_syscall(SYS_close_range, (long)first, (long)last, flags, 0, 0, 0);
}
#endif

SYSCALL_UNINSTRUMENTED
FERRY_EXPORT long syscall(long nr, ...)
{
	va_list ap;
	va_start(ap, nr);
	/* As libc's: six arguments, whether or not the caller passed them. */
	long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long),
	     a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
	va_end(ap);
	if (sandbox_confines(nr, a1))
		sandbox_enter_once();
	else if (nr == SYS_close)
		return fd_close((int)a1, raw_close);
	else if (nr == SYS_unshare)
		procinfo_unsharing(a1);
	else if (nr == SYS_setns)
		procinfo_ns_changed();
#ifdef SYS_close_range
	else if (nr == SYS_close_range)
		return fd_close_range((unsigned)a1, (unsigned)a2, (int)a3, raw_close_range);
#endif
	return raw_syscall(nr, a1, a2, a3, a4, a5, a6);
}

#endif
