/* The application's signal handlers as ferry sees them (signal.c). */
#ifndef FERRY_PRELOAD_SIGNAL_H
#define FERRY_PRELOAD_SIGNAL_H

#include <signal.h>
#include <stdbool.h>

/* Whether sa installs a handler that runs: SIG_DFL and SIG_IGN do not, with
 * SA_SIGINFO or without (the kernel reads the one field both names share). */
static inline bool signal_catches(const struct sigaction *sa)
{
	return sa->sa_handler != SIG_DFL && sa->sa_handler != SIG_IGN;
}

#endif
