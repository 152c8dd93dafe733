/*
 * This process as ferry-stat sees it (layout: statmap_layout.h). The
 * counters live in a shared file and are counted into directly, so they
 * are always current at no cost; the tables of sessions, streams and
 * listeners are written only when a reader asks, by the progress thread,
 * which a reader wakes through a socket it polls. A process nobody reads
 * pays one page and one descriptor.
 */
#ifndef FERRY_PRELOAD_STATMAP_H
#define FERRY_PRELOAD_STATMAP_H

#include "transport/stats.h"

/* Creates this process's file (removing those of our user's processes
 * that are gone) and returns the counters in it; NULL when it cannot be
 * made (ferry then counts privately, and ferry-stat does not see us). */
struct ferry_stats *statmap_open(void);
/* The datapath's name, once it is known. */
void statmap_set_transport(const char *name);
/* The descriptor a reader's wake-up makes readable, or -1. */
int statmap_wake_fd(void);
/* The wake-up came (any thread, no lock held): writes the tables if a
 * reader asked, taking the endpoint lock in passing. */
void statmap_serve(void);
/* At exit: the file goes. */
void statmap_close(void);
/* In a fork child: the parent's file is the parent's. The counters the
 * child inherited stay where they are, privately; the child's own ferry
 * makes a file of its own. */
void statmap_fork_child(void);

#endif
