/*
 * The per-thread flag that sends ferry's own calls straight to libc: the
 * interposed names check it before anything else. (ferry itself reaches
 * libc through transport/sys.h's table, never by name.)
 */
#ifndef FERRY_PRELOAD_REENTRY_H
#define FERRY_PRELOAD_REENTRY_H

#include <stdbool.h>

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
