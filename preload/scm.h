/*
 * Descriptors over a unix socket (SCM_RIGHTS), for the handover and
 * passed-socket protocols: one message of bytes and a few descriptors.
 */
#ifndef FERRY_PRELOAD_SCM_H
#define FERRY_PRELOAD_SCM_H

#include <stddef.h>
#include <sys/types.h>

/* The most descriptors one message carries. */
#define SCM_MAX_FDS 2

/* Sends len bytes of buf with fds[0..nfds) (nfds <= SCM_MAX_FDS) in one
 * message, MSG_NOSIGNAL: sendmsg's result. */
ssize_t scm_send(int sock, const void *buf, size_t len, const int *fds, unsigned nfds);
/* Receives up to len bytes into buf, and up to max descriptors
 * (close-on-exec) into fds, the rest of fds[0..max) -1; descriptors past max
 * are closed. recvmsg's result. */
ssize_t scm_recv(int sock, void *buf, size_t len, int *fds, unsigned max);

#endif
