/*
 * O_ASYNC on ferry sockets. The kernel signals a socket's owner as the
 * socket becomes ready (sk_wake_async); a ferry socket's placeholder never
 * does, so ferry sends the signal: SIGIO as kill sends it, or F_SETSIG's
 * with the poll band and the number, as the kernel's siginfo has them.
 * What fcntl sets (F_SETOWN, F_SETOWN_EX, F_SETSIG, O_ASYNC's number) is
 * recorded in the file and set on the placeholder too, which answers the
 * F_GET calls.
 */
#ifndef FERRY_PRELOAD_FASYNC_H
#define FERRY_PRELOAD_FASYNC_H

#include <stdbool.h>
#include <stdint.h>

#include "preload/fdtable.h"

void fasync_owner_set(struct ffile *f, const struct ffile_owner *o);
void fasync_owner_get(struct ffile *f, struct ffile_owner *o);

/* ioctl FIOASYNC: O_ASYNC on or off, through fd. */
void fasync_set(struct ffile *f, int fd, bool on);

/* f (set O_ASYNC) became ready for events (EPOLL* bits): signals its owner;
 * EPOLLPRI among them (urgent data) as a signal of its own. */
void fasync_signal(struct ffile *f, uint32_t events);

/* Urgent data came to f: SIGURG to its owner, if it has one. */
void fasync_urgent(struct ffile *f);

#endif
