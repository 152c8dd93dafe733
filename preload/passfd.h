/*
 * Ferry sockets passed over a unix socket (SCM_RIGHTS). The receiver gets
 * a number of the kernel socket behind a ferry socket; the sender's ferry
 * says what it is under a name made from that socket's inode (an abstract
 * unix socket, "ferry-pass.<inode>", gone with the process), which
 * the receiver asks at once when the number arrives. A stream is then
 * taken over at its first use there, as a fork child's copy is
 * (handover.h), and a listener is served by whichever holder accepts
 * (lshare.h): haproxy hands its listeners to its next process this way.
 *
 * The sender keeps a passed stream alive while the description stands
 * (PASSFD_TTL_S after the last pass, or until taken over), even if it
 * closes its number at once as senders do. A receiver without ferry gets
 * the kernel socket: not connected, so it fails at once (ENOTCONN).
 */
#ifndef FERRY_PRELOAD_PASSFD_H
#define FERRY_PRELOAD_PASSFD_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct ffile;

#define PASSFD_TTL_S 10

/* Calls fn on each descriptor msg carries (SCM_RIGHTS). */
void passfd_each(const struct msghdr *msg, void (*fn)(int fd, void *arg), void *arg);
/* fd (f's number) goes into a message on a unix socket: true when the
 * receiver can take it up (else the caller leaves it to the kernel). */
bool passfd_sent(struct ffile *f, int fd);
/* A message came in: its ferry sockets become ferry sockets here. */
void passfd_received(const struct msghdr *msg);
/* Whether a passed description still stands for this stream (the
 * handover thread keeps the stream until it does not). */
bool passfd_keeps(uint32_t sid, uint64_t token);
/* The stream was taken over: its description goes. */
void passfd_forget(uint32_t sid, uint64_t token);

/* For the handover thread, which answers on the sockets: fills up to max
 * of them into p; returns how many, and *timeout_ms until the next expiry
 * (-1 for none). */
int passfd_poll(struct pollfd *p, int max, int *timeout_ms);
/* Answers the ready ones among p[0..n) and drops what expired. */
void passfd_serve(const struct pollfd *p, int n);
/* Fork child: the parent's descriptions are the parent's. */
void passfd_fork_child(void);

#endif
