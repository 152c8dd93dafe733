/* The interposer's side of the real libc functions: the per-thread
 * internal flag, and resolving the table (transport/sys.c) before main. */
#include "autoconfig.h"

#include "preload/reentry.h"

#include "transport/sys.h"

__thread int ferry_internal_depth __attribute__((tls_model("initial-exec")));

/* Resolve before main so the first interposed call pays nothing. Only
 * libferry.so does this; a program that merely links the transport
 * resolves at its first call. */
__attribute__((constructor)) static void reentry_constructor(void)
{
	sys_resolve();
}
