/*
 * Pools of placeholders: the kernel TCP sockets behind ferry's sockets,
 * kept and reused instead of created and destroyed per connection (a
 * socket() and its close() cost more than the rest of a ferry connection
 * on the client, and one accept on the server).
 *
 * A pooled socket is held by a hidden descriptor of ferry's (close-on-exec,
 * never in the fd table), numbered at half RLIMIT_NOFILE or above where
 * there is room, so the numbers the application gets are the kernel's
 * lowest free ones as without ferry; the application's numbers are
 * duplicates of it, so it stays private to one ferry socket at a time.
 * Each pool keeps a small share of the limit at most. Two kinds:
 *  - blank: a fresh, unbound socket the kernel holds no state of, behind a
 *    new socket() or an accepted stream;
 *  - bound: bound to a local address and a port of its own, behind a
 *    client stream, so the port stays reserved (unique on the host) while
 *    it is pooled, and a new connection needs no bind or getsockname.
 *    Given back only once both directions of its last connection ended
 *    (stream.h), and reused oldest first.
 * A socket goes back only untouched: anything the kernel may keep of it
 * (an option, an address, a connection, flags) makes the caller close it.
 *
 * Thread-safe (a lock of its own, never held across a call into ferry).
 * Errors are negative errno.
 */
#ifndef FERRY_PRELOAD_PHPOOL_H
#define FERRY_PRELOAD_PHPOOL_H

#include <stdbool.h>
#include <sys/socket.h>

/* A blank TCP socket of domain (AF_INET or AF_INET6): its hidden fd. */
int phpool_take(int domain);
/* Gives back a blank socket from phpool_take (closed if the pool is full). */
void phpool_give(int domain, int hfd);

/* A TCP socket of domain bound to src with a port of its own: its hidden
 * fd, and its address in *local. src is the address only (port 0). */
int phpool_take_bound(int domain, const struct sockaddr *src, socklen_t slen,
		      struct sockaddr_storage *local, socklen_t *llen);
/* Gives back a bound socket; local as phpool_take_bound set it. */
void phpool_give_bound(int hfd, const struct sockaddr_storage *local, socklen_t llen);

/*
 * Every pooled socket, in the pool or behind a live socket, holds a
 * descriptor of the process's own RLIMIT_NOFILE. fd is a number the
 * kernel just handed out (the lowest free, so at least that many are in
 * use): true when that is the first to come within an eighth of the
 * hidden descriptors' floor (half the limit). From then until numbers fall
 * below half of that, the pools hand nothing out (-EMFILE) and keep
 * nothing; on true, the caller gives back what it holds (sock_reclaim).
 */
bool phpool_pressure(int fd);
/* Closes every pooled socket; also on a daemon() child that starts ferry
 * anew. */
void phpool_drain(void);
/* Grows the process's descriptor table past the hidden descriptors' floor
 * now; called before ferry starts threads of its own (see phpool.c). */
void phpool_grow_table(void);
/*
 * Around fork: the child holds copies of every pooled descriptor, so no
 * pooled socket may serve a later socket in either process. prepare takes
 * the pool's lock before fork; parent and child let it go and close what
 * the pools hold (the child's copies, and the parent's now shared ones).
 * A descriptor handed out before the fork is not kept when given back
 * (closed instead), whoever holds it: one between phpool_take and its
 * socket, or behind a closing stream, is in the child too.
 */
void phpool_fork_prepare(void);
void phpool_fork_parent(void);
void phpool_fork_child(void);

#endif
