/*
 * Listeners shared with other processes. A kernel listening socket belongs
 * to every process holding it: a prefork server's master opens it and its
 * workers accept on their inherited copies. A ferry listener's rendezvous
 * socket is a kernel socket too and is shared the same way: a fork child
 * inherits it with the listener, and whichever holder reads a rendezvous
 * answers with its own endpoint, so the connection lands in that process's
 * queue and its bytes flow there directly, never through another process.
 *
 * Only a process that shows it accepts reads the socket. After a fork every
 * holder's listener is dormant (rendezvous datagrams wait in the kernel, as
 * connections wait in a shared accept queue) until the process accepts on
 * it, polls it or adds it to an epoll set: nginx's master never does, its
 * workers do; a parent whose listener sits in an epoll set keeps reading.
 */
#ifndef FERRY_PRELOAD_LSHARE_H
#define FERRY_PRELOAD_LSHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct ffile;
struct fsock;
struct stream;
struct mgmt_offer;
struct listener_keep;

/* f is about to be accepted on, polled or added to an epoll set: a dormant
 * or inherited listener starts answering here. Any thread, no lock held. */
void lshare_interest(struct ffile *f);

/* After fork, in the parent, no lock held: its listeners are shared, and
 * those nobody waits on go dormant. */
void lshare_fork_parent(void);
/* f, a listener, was passed to another process (SCM_RIGHTS): as after a
 * fork, it is shared, and dormant until it is accepted on here. */
void lshare_passed(struct ffile *f);
/* In the fork child, before its pass over the table. */
void lshare_fork_child_begin(void);
/* In the fork child's pass over the table (single-threaded): a listening
 * file keeps a duplicate of the parent's rendezvous socket for later. */
void lshare_fork_child(struct ffile *f);
/*
 * A process letting go of a shared listener (nginx's old worker at a
 * reload) holds connections it queued and the application never accepted.
 * The kernel's accept queue is the socket's, and another worker would
 * accept them; here each is kept (handover.h) and offered to the
 * listener's other holders through its rendezvous socket, and whichever
 * accepts takes it over at first use, bytes and all. One nobody takes
 * within 5 s is reset, as it was before.
 */
struct lshare_offers {
	struct mgmt_offer *v;
	size_t n, cap;
};
/* For listener_remove (endpoint lock held), arg a struct lshare_offers:
 * keeps queued streams and notes their offers, and notes the offers not
 * taken here to pass them on. */
extern const struct listener_keep lshare_keep;
/* After the listener is gone and mgmt reads its socket no more: sends the
 * offers to addr (the listener's), and frees them. */
void lshare_send_offers(struct lshare_offers *o, const struct sockaddr *addr, socklen_t len);
/* mgmt's offer handler (mgmt_set_offer_handler): queues the offer on the
 * listener, where accept makes it a stream of another process's
 * (FSOCK_REMOTE). */
void lshare_on_offer(void *ctx, const struct sockaddr *addr, socklen_t len,
		     const struct mgmt_offer *o);

/* The file is going: an inherited rendezvous duplicate is closed. */
void lshare_release(struct fsock *sk);

#endif
