/* What /proc says of a process: shared by softib (its fabric's owners) and
 * mgmt (peer processes), which both tell a live process from a later one
 * that was given the same pid. */
#ifndef FERRY_TRANSPORT_PROCINFO_H
#define FERRY_TRANSPORT_PROCINFO_H

#include <stdint.h>
#include <sys/types.h>

/* pid's start time in clock ticks after boot (field 22 of /proc/PID/stat);
 * 0 when it is gone or unreadable. pid 0 is this process. */
uint64_t procinfo_start_time(pid_t pid);

/* The inode of this process's namespace ns ("pid", "net"), which names it
 * on this host; 0 when unreadable. Read once per process. */
uint64_t procinfo_ns_inode(const char *ns);
/* In a fork child (parent: the pid it forked from): the parent's namespace
 * inodes are the child's too, unless the process changed namespaces. */
void procinfo_forked(pid_t parent);
/* The process is about to change namespaces (unshare, setns): what was
 * read is forgotten, and no fork child trusts its parent's answers again. */
void procinfo_ns_changed(void);
/* unshare(flags) is about to run: procinfo_ns_changed if it moves the
 * process's network namespace or its children's pid namespace. */
void procinfo_unsharing(long flags);
/* How many times this process read a namespace from /proc (for tests). */
uint64_t procinfo_ns_reads(void);

#endif
