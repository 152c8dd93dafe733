/*
 * Datagrams sent after the endpoint lock is let go.
 *
 * A send on loopback (a udp packet, softib's doorbell) wakes the receiver
 * inside the sender's system call. With few cores, the woken process often
 * takes the sender's CPU at once. If the sender holds its endpoint's lock
 * at that moment, the lock stays held while the sender is off the CPU, and
 * the process's other threads sleep on it (pgbench -j 2: about one futex
 * wait per transaction).
 *
 * Between txdefer_begin and the matching txdefer_end, a thread's small
 * datagrams are copied here instead, and txdefer_end sends them once the
 * caller has let the lock go. Nothing is held across the gap but copies,
 * so the endpoint may free or reuse its buffers at once. A datagram that
 * cannot be sent then is lost as on a wire, and its weight (the packets it
 * carries) is added to the counter given with it.
 *
 * An fd that a deferred datagram may use must not be closed while another
 * thread still has one staged for it: the number could be reused by then.
 * txdefer_quiesce, called before such a close, sends the caller's own
 * staged datagrams and waits out everyone else's; txdefer_close leaves the
 * close to the last thread that holds one.
 */
#ifndef FERRY_TRANSPORT_TXDEFER_H
#define FERRY_TRANSPORT_TXDEFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* Datagrams a thread stages at most, and bytes each; a larger or further
 * one is sent at once (after the staged ones, in order). */
#define TXDEFER_MAX 16
#define TXDEFER_BYTES 2048

void txdefer_begin(void);
/* Sends what the thread staged once the outermost txdefer_begin ends. */
void txdefer_end(void);
/*
 * Stages a datagram of len bytes gathered from iov, for fd and (to, tolen:
 * NULL, 0 for a connected socket). false: not staged (no txdefer_begin is
 * open on this thread, it is too big, or no memory); the caller sends it
 * itself. failures, if not NULL, is added weight atomically if the send
 * fails; it must outlive the send (see txdefer_quiesce).
 */
bool txdefer_add(int fd, const struct sockaddr *to, socklen_t tolen, const struct iovec *iov,
		 size_t iovcnt, size_t len, uint64_t *failures, uint32_t weight);
/* Sends the thread's staged datagrams now, lock or no lock: for a caller
 * about to poll for the answer to them. */
void txdefer_flush(void);
/* Before closing an fd (or freeing a failure counter) that staged datagrams
 * may use: sends this thread's, waits until no other thread has any. false:
 * one kept them unsent for a second, and they may still go out. */
bool txdefer_quiesce(void);
/* The same for fd alone, for a caller that holds the endpoint lock under
 * which datagrams to fd are staged (or has put fd out of that endpoint's
 * reach): other threads' datagrams to other fds are not waited for. A
 * failure counter shared with other fds must outlive this. */
bool txdefer_quiesce_fd(int fd);
/* Closes fd, under the same condition as txdefer_quiesce_fd, without
 * waiting: while another thread still holds a datagram for it, fd stays
 * open (its number taken), and the first thread to send after that one
 * has sent its datagrams (usually that very thread) closes it; so does
 * txdefer_quiesce.
 * A management thread closing a gone peer's socket yielded its CPU over
 * and over to an application thread that had the peer's last packets
 * staged: often the very thread its lock wait had just preempted. */
void txdefer_close(int fd);
/* In a fork child: only the forking thread exists, and the endpoint lock it
 * forked under (with its txdefer_begin) is forgotten. */
void txdefer_fork_child(void);

#endif
