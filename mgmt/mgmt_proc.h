/*
 * Who a peer process is on its host, and a death notice for it. Two
 * processes on one host (same boot, same pid and network namespaces) tell
 * each other their pid and start time at the handshake; each then holds a
 * pidfd of the other, which polls readable the moment that process is
 * gone, however it died. That is how kernel TCP knows a local peer died at
 * once: its kernel closes the dead process's sockets. A peer in another
 * network namespace counts as another host (its death is known only from
 * what the network says), as the multi-host tests model it.
 */
#ifndef FERRY_MGMT_PROC_H
#define FERRY_MGMT_PROC_H

#include <stdint.h>

struct mgmt_proc {
	uint64_t host;  /* boot, pid and network namespace; 0: unknown */
	uint32_t pid;
	uint64_t start; /* start time in clock ticks after boot (/proc/PID/stat) */
};

/* This process. host is 0 where /proc cannot tell. */
void mgmt_proc_self(struct mgmt_proc *out);

/* A pidfd (O_CLOEXEC, polls POLLIN once the process exits) of peer when it
 * lives on self's host in another process; -ESRCH when it is gone already
 * or its pid now names another process; -EREMOTE when it is not local;
 * -errno otherwise. */
int mgmt_proc_watch(const struct mgmt_proc *self, const struct mgmt_proc *peer);

#endif
