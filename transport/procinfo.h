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
 * on this host; 0 when unreadable. */
uint64_t procinfo_ns_inode(const char *ns);

#endif
