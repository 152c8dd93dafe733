/*
 * The process's ferry state: started lazily at the first eligible socket
 * call, from FERRY_* (an invalid value is refused with a message naming the
 * variable, and ferry then stays pass-through). Counters are dumped as JSON
 * to FERRY_STATS (%p = pid) at exit, and on demand while running when the
 * process gets SIGRTMIN+7 (`kill -s RTMIN+7 PID`; written by the progress
 * thread, installed only when FERRY_STATS is set and the application has
 * no handler of its own for that signal).
 */
#ifndef FERRY_PRELOAD_FERRY_H
#define FERRY_PRELOAD_FERRY_H

#include <stdbool.h>

#include "preload/config.h"
#include "transport/config.h"
#include "transport/stats.h"

struct nexus;
struct rpc;
struct mgmt;

enum ferry_state {
	FERRY_UNINIT,
	FERRY_OFF,    /* disabled, refused config, or could not start: pass-through */
	FERRY_ON,
	FERRY_FORKED, /* a fork child: inherited streams are dead, new sockets plain */
};

struct ferry_proc {
	int state; /* atomic enum ferry_state */
	struct ferry_config cfg;
	struct preload_config pcfg; /* the interposer's own: enable, ports, spin */
	struct nexus *nx;
	struct rpc *rpc;
	struct mgmt *mgmt;
	struct ferry_stats *stats;
	const char *transport;
	bool unavailable; /* enabled, but could not start: connects are counted */
	/* A fork child starts with its parent's settings, not the environment's
	 * (nginx empties its workers' environment). */
	bool cfg_kept;
};

extern struct ferry_proc ferry;

/* The dump signal: SIGRTMIN + this (only installed when FERRY_STATS is set
 * and the application has no handler for it). */
#define FERRY_STATS_SIGNAL_OFFSET 7

static inline enum ferry_state ferry_state(void)
{
	return (enum ferry_state)__atomic_load_n(&ferry.state, __ATOMIC_ACQUIRE);
}

/* Starts ferry if this is the first eligible call; true when it is on. */
bool ferry_up(void);
/* ferry_up; when this very call starts ferry, first_use(arg) runs as soon
 * as the endpoint and its management thread exist, before the progress
 * thread starts (a fork child dials its stream's peer there: the handshake
 * then runs while the start finishes). */
bool ferry_up_then(void (*first_use)(void *arg), void *arg);

/* Counters: the nexus's when running, a local set otherwise. */
struct ferry_stats *ferry_stats(void);

/* Writes FERRY_STATS now (no-op when unset). */
void ferry_stats_dump(void);

/* The endpoint lock, with this thread marked as inside ferry. */
void ferry_lock(void);
void ferry_unlock(void);

/* Sends DATA the application queued since its last wait (one batch). */
void ferry_flush(void);
/* The same, under ferry_lock; nothing when nothing is queued. */
void ferry_flush_locked(void);

/* Marks the fork child's state (fork.c). */
void ferry_forked_child(void);

/*
 * The process is leaving: what its streams hold goes to the peers, then
 * their ends, waiting at most 2 s for the answers; the counters are written
 * and ferry-stat's file removed. Run by exit's handlers and by _exit (exit.c).
 */
void ferry_exit_drain(void);

/* Ends the process as _exit does, without the drain. */
_Noreturn void ferry_exit_plain(int status);

#endif
