/*
 * The real libc functions behind every interposed name (transport/sys.h's
 * table, which the whole library shares), and the per-thread flag that
 * sends ferry's own calls straight to them.
 */
#ifndef FERRY_PRELOAD_LIBC_H
#define FERRY_PRELOAD_LIBC_H

#include <stdbool.h>

#include "transport/sys.h"

/* The interposer's names for the one table of transport/sys.h, kept so its
 * many call sites read as before: libc() is sys(). */
#define libc_fns sys_fns
static inline const struct sys_fns *libc(void)
{
	return sys();
}
static inline void libc_resolve(void)
{
	sys_resolve();
}

/*
 * Depth of ferry-internal code on this thread: while it is non-zero every
 * interposed call goes straight to libc. ferry's own calls go through sys()
 * and never reach the interposer; the flag is for the calls that libraries
 * ferry runs make by name (libibverbs reading its device files, for one),
 * so they never loop back into the interposer either.
 */
extern __thread int ferry_internal_depth __attribute__((tls_model("initial-exec")));

static inline bool ferry_internal(void)
{
	return ferry_internal_depth != 0;
}
static inline void ferry_internal_enter(void)
{
	ferry_internal_depth++;
}
static inline void ferry_internal_leave(void)
{
	ferry_internal_depth--;
}

#endif
