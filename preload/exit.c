/*
 * _exit and _Exit. They run no exit handlers, yet the kernel still delivers
 * what a socket holds when its process ends, then the end of the stream:
 * inetd-style helpers and fork children write their answer and _exit. So
 * they drain as exit does (ferry_exit_drain), bounded the same way.
 */
#include "autoconfig.h"

#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/export.h"
#include "preload/ferry.h"
#include "preload/reentry.h"

_Noreturn void ferry_exit_plain(int status)
{
	/* What glibc's _exit does; its own entry would come back here. */
	for (;;)
		syscall(SYS_exit_group, status);
}

static _Noreturn void exit_now(int status)
{
	/* From inside ferry means a signal handler interrupted it: the drain
	 * could wait for a lock this thread holds. _exit is async-signal-safe,
	 * so handlers do call it; they leave as before. A process where ferry
	 * never started (a fork child that only execs or leaves) has nothing
	 * to drain, and writes no counters either. */
	if (!ferry_internal() && ferry_state() == FERRY_ON)
		ferry_exit_drain();
	ferry_exit_plain(status);
}

FERRY_EXPORT void _exit(int status)
{
	exit_now(status);
}

FERRY_EXPORT void _Exit(int status)
{
	exit_now(status);
}
