/*
 * Relays for processes that cannot run ferry. A process that confines
 * itself with seccomp (sshd's privilege-separated child) may not make the
 * system calls a datapath needs: socket(), sendmsg, epoll, threads. Before
 * its filter goes on, each ferry connection it holds becomes one end of a
 * unix socket pair (sandbox.c), and the process that runs the stream pumps
 * bytes between the other end and the stream here, on its handover thread:
 * the only case where a ferry connection's bytes pass through a process
 * that does not use them, because the one that does may not reach ferry.
 * The stream outlives the relay: when the confined process closes its end
 * (or exits), the owner keeps what it kept before (its own copy, or an
 * orphan for the next holder). Meanwhile the owner's own application finds
 * the stream neither readable nor writable (stream_relay_mark), so what it
 * writes follows what the confined process wrote, and it reads nothing that
 * process read: sshd's monitor takes up the session the moment its child
 * exits.
 */
#ifndef FERRY_PRELOAD_RELAY_H
#define FERRY_PRELOAD_RELAY_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

struct ffile;
struct stream;

/* Pumps s through fd from now on (the handover thread): pin is a reference
 * to s's file or NULL for an orphan; their_end a duplicate of the confined
 * process's end and pidfd that process, or both -1 when it is this one (the
 * relay then ends at fd's EOF). 0 or -errno (the descriptors are then the
 * caller's still). */
int relay_add(struct stream *s, struct ffile *pin, int fd, int their_end, int pidfd);
/* Whether s is relayed (an orphan that is must be kept). */
bool relay_holds(const struct stream *s);
/* Ends s's relays (s goes to another process): the confined process reads
 * the end of its socket, as a use of a connection by two processes at once
 * may end one of them. */
void relay_drop(const struct stream *s);
/* Fills up to max pollfds for the relays; *timeout_ms becomes the longest
 * the thread may sleep (the stream side is looked at in turns). Returns the
 * count. */
int relay_poll(struct pollfd *p, int max, int *timeout_ms);
/* Moves what can move each way, and ends relays whose end was closed. */
void relay_pump(void);
/* At exit, any thread, no lock held: the relays this process runs for
 * itself send what its confined threads wrote and end their streams, as
 * the kernel would deliver a closed socket's buffer; waits at most max_ns.
 * Only sleeps while it waits (its caller may be under a seccomp filter). */
void relay_exit_wait(uint64_t max_ns);
/* Fork child: the parent's relays are the parent's. */
void relay_fork_child(void);

#endif
