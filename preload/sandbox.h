/* A process confining itself (see sandbox.c): what syscall.c needs. */
#ifndef FERRY_PRELOAD_SANDBOX_H
#define FERRY_PRELOAD_SANDBOX_H

#include <linux/seccomp.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

/* Whether a raw system call loads a seccomp filter (libseccomp's way).
 * syscall(3) asks before anything else, for calls a sanitizer's runtime
 * makes before its shadow memory exists: inline, and it reads nothing but
 * its arguments. */
static inline __attribute__((always_inline)) bool sandbox_confines(long nr, long a1)
{
	return (nr == SYS_seccomp && (a1 == SECCOMP_SET_MODE_STRICT || a1 == SECCOMP_SET_MODE_FILTER)) ||
	       (nr == SYS_prctl && a1 == PR_SET_SECCOMP);
}

/* Relays every ferry connection and steps ferry out of the process, once. */
void sandbox_enter_once(void);

#endif
