/*
 * The management thread: one per process, over kernel UDP whatever the
 * datapath. It answers rendezvous on listeners' UDP ports, runs the session
 * handshake (connect with retries, duplicate suppression by token,
 * disconnect), and watches the peers it shares live sessions with. A peer
 * known to be gone has its sessions reset with -EOWNERDEAD: on this host the
 * moment its process exits (a pidfd, mgmt_proc.h), elsewhere when its
 * control port answers ICMP unreachable to a ping. A peer on another host
 * that stays silent for cfg->failure_timeout_ms has them reset with
 * -ETIMEDOUT; a silent peer on this host is stalled (stopped, debugged),
 * not dead, and keeps them for as long as it lives, as kernel TCP keeps a
 * stopped process's connections. Every pending request on a reset session
 * completes with that error.
 *
 * It takes an endpoint's lock (rpc_lock) to install or reset sessions, so
 * none of these functions may be called with an rpc lock held.
 */
#ifndef FERRY_MGMT_H
#define FERRY_MGMT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct ferry_config;
struct ferry_stats;
struct rpc;
struct mgmt;

/* Starts the thread. cfg and stats must outlive it. NULL with *err and msg. */
struct mgmt *mgmt_create(const struct ferry_config *cfg, struct ferry_stats *stats, int *err,
			 char *msg, size_t msglen);
/* Tells peers our sessions are closing (best effort), stops the thread. */
void mgmt_destroy(struct mgmt *m);

/*
 * Answers rendezvous on UDP addr for endpoint rpc (port 0 picks one; see
 * mgmt_listen_port). Returns 0, -EADDRINUSE when the port is taken, -errno.
 */
int mgmt_listen(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr, socklen_t len);
/* mgmt_listen_fd flags: what the TCP listener has, the rendezvous socket copies */
#define MGMT_LISTEN_REUSEPORT 1u
#define MGMT_LISTEN_V6ONLY 2u
/*
 * mgmt_listen, on udp_fd if >= 0 (a socket from mgmt_rendezvous_socket bound
 * to addr's port, which mgmt owns from here on, whatever the result).
 * MGMT_LISTEN_REUSEPORT shares the rendezvous port too: with other processes
 * (through SO_REUSEPORT) and with this endpoint's other listeners on the
 * address (one socket answers for all; each mgmt_unlisten lets go of one).
 * MGMT_LISTEN_V6ONLY leaves IPv4 to a listener beside it on the same port.
 */
int mgmt_listen_fd(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr, socklen_t len,
		   int udp_fd, unsigned flags);
/*
 * A rendezvous socket on addr's host and a port the kernel picks, for a TCP
 * listener that asked for any port: it then binds the same port, so its
 * rendezvous port cannot be taken. Returns the fd and sets *port, or -errno.
 */
int mgmt_rendezvous_socket(const struct sockaddr *addr, socklen_t len, uint16_t *port);
int mgmt_unlisten(struct mgmt *m, const struct sockaddr *addr, socklen_t len);
/* The descriptor of addr's rendezvous socket (a fork child inherits it
 * under the same number), or -ENOENT. */
int mgmt_listen_fd_number(struct mgmt *m, const struct sockaddr *addr, socklen_t len);
/*
 * A dormant listener's rendezvous socket is not read: its datagrams wait in
 * the kernel for another process holding the same socket (a prefork
 * server's workers), as connections wait in a shared TCP accept queue for
 * whichever process accepts. -ENOENT when addr has no listener.
 */
int mgmt_listen_dormant(struct mgmt *m, const struct sockaddr *addr, socklen_t len, bool dormant);
/* Handshakes that reach the control sockets make sessions of rpc (the next
 * owner of a stream that moves between processes dials its peer there). */
int mgmt_answer_on_control(struct mgmt *m, struct rpc *rpc);
/* Where session's peer process answers handshakes: 0 and *out, or -ENOENT. */
int mgmt_peer_addr(struct mgmt *m, struct rpc *rpc, int session, struct sockaddr_storage *out,
		   socklen_t *len);
/* The UDP port a listener bound (after listening on port 0); 0 if none. */
uint16_t mgmt_listen_port(struct mgmt *m, const struct sockaddr *addr, socklen_t len);

/*
 * Gets a session from rpc to the endpoint answering rendezvous at addr,
 * reusing a live one to that address (concurrent calls for one address share
 * one attempt). Blocks up to timeout_ms. Returns the
 * session number, -ECONNREFUSED when the port answered ICMP unreachable,
 * -ETIMEDOUT when nothing answered (a plain peer), -EPROTONOSUPPORT when
 * the peer runs another datapath, -errno otherwise. -EDEADLK when called
 * on the management thread (from a done callback).
 */
int mgmt_connect(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr, socklen_t len,
		 unsigned timeout_ms);
/* The same with flags (MGMT_CONNECT_*, below). */
int mgmt_connect_flags(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr, socklen_t len,
		       unsigned timeout_ms, unsigned flags);

/* The same without blocking: done(ctx, session or -errno) runs later on the
 * management thread, without any rpc lock, exactly once (with -ECANCELED
 * when mgmt_destroy comes first). done may call every function here except
 * mgmt_connect and mgmt_destroy, and must not block. Returns 0 or -errno. */
typedef void (*mgmt_connect_fn)(void *ctx, int session_or_err);
int mgmt_connect_async(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr,
		       socklen_t len, unsigned timeout_ms, mgmt_connect_fn done, void *ctx);

/* MGMT_CONNECT_FRESH: a new handshake even if a session to addr is up (a
 * shared listener's rendezvous may now be answered by another process);
 * the old session stays for its streams but is not handed out for addr. */
#define MGMT_CONNECT_FRESH 1u
/* MGMT_CONNECT_ANOTHER: a handshake of its own even if a session to addr is
 * up or one is under way, to find out which process answers there now (a
 * shared listener's holders take turns). When that is a process a session
 * to addr already goes to, the answer is that session, and the new one is
 * closed on both sides. */
#define MGMT_CONNECT_ANOTHER 2u
int mgmt_connect_async_flags(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr,
			     socklen_t len, unsigned timeout_ms, unsigned flags,
			     mgmt_connect_fn done, void *ctx);

/* Closes a session on both sides (the peer's side sees RPC_SESSION_CLOSED):
 * locally its pending requests complete with -ENOTCONN before this returns. */
void mgmt_disconnect(struct mgmt *m, struct rpc *rpc, int session);

/* Drops everything mgmt holds for rpc (listeners, connects in progress,
 * sessions, closed on both sides); call before rpc_destroy when the
 * management thread outlives the endpoint. */
void mgmt_forget_rpc(struct mgmt *m, struct rpc *rpc);

/*
 * Connections a process queued on a shared listener it lets go of (nginx's
 * old worker at a reload) are offered to the other holders: the offer goes
 * to the listener's rendezvous socket, and whichever process reads there
 * (one that accepts) gets it through the handler, on the management
 * thread (it must not block). addr is the listener's (its rendezvous
 * socket's) address. mgmt_offer: 0 or -errno.
 */
struct mgmt_offer {
	uint32_t pid, sid, peer_sid;
	uint64_t token;
};
int mgmt_offer(struct mgmt *m, const struct sockaddr *addr, socklen_t len,
	       const struct mgmt_offer *o);
typedef void (*mgmt_offer_fn)(void *ctx, const struct sockaddr *addr, socklen_t len,
			      const struct mgmt_offer *o);
void mgmt_set_offer_handler(struct mgmt *m, mgmt_offer_fn fn, void *ctx);

/*
 * The control sockets (and, through the endpoint, the udp datapath's)
 * start on loopback; the first listener on another address, or the first
 * connect to one, moves them to the wildcard at the same ports (udp_bind.h).
 * fn is then called on the management thread (it must not block): the
 * datapath's notify fd kept its number, but sleepers registered on it
 * must register again.
 */
typedef void (*mgmt_widen_fn)(void *ctx);
void mgmt_set_widen_handler(struct mgmt *m, mgmt_widen_fn fn, void *ctx);
/* In a fork child: closes the control sockets, which are the parent's, and
 * keeps what the route's MTU was for the child's next mgmt. */
void mgmt_forked_child(struct mgmt *m);
/* Around fork, with the thread held: no caller's command is half done in
 * the tables the child copies (mgmt_freeze in the parent before, mgmt_thaw
 * after; the child's copy stays frozen, for mgmt_peer_addr_forked). */
void mgmt_freeze(struct mgmt *m);
void mgmt_thaw(struct mgmt *m);
/* In a fork child, before mgmt_forked_child: what mgmt_peer_addr answered
 * in the parent at the fork, read from the child's copy. */
int mgmt_peer_addr_forked(struct mgmt *m, struct rpc *rpc, int session,
			  struct sockaddr_storage *out, socklen_t *len);

/* Holds the management thread still at a point where it holds nothing,
 * until mgmt_release (fork, thread_pause.h). Not from the thread itself. */
void mgmt_hold(struct mgmt *m);
void mgmt_release(struct mgmt *m);

/* This process's random identity on the management channel. */
uint64_t mgmt_uuid(const struct mgmt *m);

#endif
