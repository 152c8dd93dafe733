/*
 * Streams that follow their descriptor into a fork child. A kernel socket
 * belongs to every process holding it; a ferry stream lives in one
 * process's endpoint, so the child's copy names the stream its parent runs
 * (FSOCK_REMOTE). At the child's first use the parent hands it over: it
 * stops the stream, waits until every byte either way is in, and sends the
 * child the stream's state and unread bytes over a unix socket; the child
 * dials the peer and continues the stream on its own session (stream.h,
 * "moving"). The bytes then flow between the child and the peer directly.
 * This is how a postgres backend serves what its postmaster accepted.
 *
 * The parent that closes its copy while a child forked since the stream
 * began still runs keeps the stream, without a FIN (the kernel sends none
 * while a copy is open): the child takes it over, or the stream ends
 * normally once no such child is left.
 */
#ifndef FERRY_PRELOAD_HANDOVER_H
#define FERRY_PRELOAD_HANDOVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct ffile;
struct stream;

/* Starts the thread that serves other processes (children, receivers of
 * passed sockets: passfd.h) if it does not run yet. 0 or -errno. */
int handover_serve(void);
/* The thread looks at its lists again. */
void handover_poke(void);
/* Before a fork (no lock held): the socket children ask on exists before
 * any child could ask. */
void handover_fork_prepare(void);
/* Holds the thread that serves children still, until handover_release
 * (fork: transport/thread_pause.h). */
void handover_hold(void);
void handover_release(void);
/* First in the fork child: the parent's thread, socket and children are
 * not the child's. */
void handover_fork_child_begin(void);
/* In the parent after a fork (no lock held): child now holds copies of
 * every stream. */
void handover_fork_parent(pid_t child);
/* In the fork child's pass, before the parent's streams are forgotten: f's
 * stream becomes the parent's to hand over (FSOCK_REMOTE). */
void handover_fork_child(struct ffile *f, pid_t parent);
/* f is FSOCK_REMOTE: takes the stream over from its owner. Afterwards f is
 * a stream of this process, or dead (reads say reset) when the owner is
 * gone. Any thread, no lock held. */
void handover_adopt(struct ffile *f);
/* f (a stream this process runs, or one another runs for it) is to be
 * relayed by the process that runs it through theirs, one end of a unix
 * socket pair whose other end (mine) this process keeps (relay.h). 0 or
 * -errno. No lock held. */
int handover_relay(struct ffile *f, int theirs, int mine);
/* The application closed its last copy of s (endpoint lock held): true when
 * a child may still use it, and s is kept (the caller must not close it). */
bool handover_keep(struct stream *s);
/* s, which has no file (endpoint lock held, the caller's reference passed
 * on), is kept for another process to take over until until_ns (then
 * closed); false when it cannot be (no thread serves others: handover_serve
 * first). */
bool handover_keep_until(struct stream *s, uint64_t until_ns);
/* At exit, no lock held: waits, at most max_ns, until no stream kept with
 * handover_keep_until waits for its taker (an old nginx worker exits as soon
 * as it let go of its listener: the connections it queued go first). */
void handover_exit_wait(uint64_t max_ns);

#endif
