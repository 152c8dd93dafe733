/*
 * The management thread's state, shared by its two halves: mgmt.c (the
 * thread, its command queue and sockets) and mgmt_session.c (handshakes,
 * peers, heartbeats).
 *
 * Everything below the command queue (listeners, connects in progress,
 * sessions, peers) is guarded by the state lock, which the thread holds
 * whenever it is not asleep in poll(). A command that waits for nothing
 * from the network runs on the caller's thread under that lock, so asking
 * costs no wake-up of the thread and no sleep of the caller (a fork-per-
 * connection server asks several times per connection); a connect is
 * queued to the thread, which drives its handshake. An endpoint's lock is
 * taken around each rpc call, after the state lock, and never held across
 * poll().
 *
 * The tables of live things are linked lists: a process has a handful of
 * peers and live sessions (sessions are cached and shared by every stream),
 * so a scan is cheaper than keeping a hash in step. Closed server sessions
 * are another matter: a client of a fork-per-connection server (pgbench -C
 * against postgres) is dialled by each new backend, and their tombstones,
 * kept for seconds, number in the thousands, so they are hashed.
 */
#ifndef FERRY_MGMT_INTERNAL_H
#define FERRY_MGMT_INTERNAL_H

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <uthash.h>

#include "mgmt/mgmt.h"
#include "mgmt/mgmt_net.h"
#include "mgmt/mgmt_proc.h"
#include "mgmt/mgmt_wire.h"
#include "transport/thread_pause.h"

#define MGMT_MS 1000000ull

/* A process we share live sessions with. */
struct mpeer {
	struct mpeer *next;
	uint64_t uuid;
	struct mgmt_addr addr; /* where to ping: its control socket once a PING showed it */
	bool addr_from_ping;
	uint64_t last_heard_ns;
	uint64_t next_ping_ns;
	unsigned nsessions;
	/* A process on this host: polls readable once it is gone (-1: another
	 * host, or it could not be watched). Silence from a watched peer is a
	 * stall, never a death, so it is pinged once (for its control address)
	 * and then left alone. */
	int pidfd;
	bool pinged;
	bool gone; /* it had exited before it could be watched */
	/* Watched once the datagram that made it is answered (mgmt_on_datagram):
	 * opening the pidfd and reading /proc took 30-60 us of a fork child's
	 * handshake, both ways, before its answer or its connect went on. */
	bool watch_due;
	struct mgmt_proc proc; /* who it says it is, for that watch */
};

/* A live session mgmt made (a closed server session leaves a struct mtomb). */
struct msess {
	struct msess *next;
	struct rpc *rpc;
	int session;
	uint64_t token;
	uint64_t peer_uuid;
	struct mpeer *peer;
	bool client;
	struct mgmt_addr rendezvous;      /* client: the address dialled */
	uint8_t resp[MGMT_WIRE_MAX_SIZE]; /* server: the answer, for retried requests */
	size_t resp_len;
};

/* A closed server session, remembered for TOMBSTONE_NS so a late retried
 * CONNECT_REQ is ignored rather than raising a second session. */
struct mtomb {
	struct mgmt_tomb_key {
		uint64_t peer_uuid;
		uint64_t token;
	} key;
	uint64_t closed_ns;
	struct mtomb *next; /* in closing order: the oldest first */
	UT_hash_handle hh;
};

/* Someone waiting for a connect: a blocked mgmt_connect or an async done(). */
struct waiter {
	struct waiter *next;
	mgmt_connect_fn fn;
	void *ctx;
	bool sync;
	int result;
	uint64_t deadline_ns;
};

/* A connect in progress: one per (endpoint, address), shared by its waiters. */
struct pending {
	struct pending *next;
	struct rpc *rpc;
	struct mgmt_addr addr;
	uint64_t token;
	int session;
	uint32_t max_data;
	uint64_t next_try_ns;
	uint64_t backoff_ns;
	struct waiter *waiters;
};

struct listener {
	struct listener *next;
	int fd;
	struct rpc *rpc;
	struct mgmt_addr asked, bound;
	bool reuseport; /* SO_REUSEPORT: other processes' listeners may share the port */
	unsigned users; /* TCP listeners of this process answered here */
	/* Not read: the socket is shared with other processes (fork, exec)
	 * and this one shows no sign of accepting, so a rendezvous it took
	 * would queue a connection nobody here accepts (mgmt_listen_dormant). */
	bool dormant;
	/* In the set the thread polls now (built before the last poll). */
	bool polled;
};

struct cmd;

/* What the route to a host (port 0) carries, and when that was asked. */
struct mgmt_mtu {
	struct mgmt_addr host;
	uint32_t pkt;
	uint64_t at_ns;
};

struct mgmt {
	const struct ferry_config *cfg;
	struct ferry_stats *stats;
	uint64_t uuid;
	struct mgmt_proc self; /* told to peers at the handshake */
	pthread_t thread;
	int evfd;
	int ctl4, ctl6; /* control sockets, IP_RECVERR on; ctl6 -1 without IPv6 */

	pthread_mutex_t state; /* guards everything below the queue (see the top) */
	/* Bumped under state by a caller's command that changes what the
	 * thread polls: the thread then drops what its poll returned. */
	unsigned poll_gen;
	bool down; /* the thread is gone and its tables with it */
	pthread_mutex_t mu; /* guards the queue, stop and every sync cmd's done/result */
	pthread_cond_t cv;
	struct cmd *queue, **queue_tail;
	bool stop;
	struct thread_pause pause; /* fork holds the thread still (mgmt_hold) */
	mgmt_offer_fn offer_fn;    /* set before any offer can arrive */
	void *offer_ctx;
	bool wide;                 /* control sockets on the wildcard (udp_bind.h) */
	mgmt_widen_fn widen_fn;
	void *widen_ctx;

	struct listener *listeners;
	size_t nlisteners;
	struct rpc *ctl_rpc; /* atomic: answers handshakes on the control sockets; NULL: none */
	struct pollfd *pfd; /* poll set, rebuilt each turn */
	struct listener **pfd_owner;
	size_t pfd_cap;
	struct pending *pendings;
	struct msess *sessions; /* live ones */
	struct mtomb *tombs;    /* hashed by key */
	struct mtomb *tombs_oldest, **tombs_tail;
	struct mpeer *peers;
	unsigned npidfds; /* peers with a pidfd: the poll set holds them */
	uint64_t next_sweep_ns;
	/* The last host path_data_max asked the route about: a
	 * fork-per-connection server's peers all live at one address. */
	struct mgmt_mtu mtu;
	struct waiter *completions, **completions_tail; /* async done() calls due */
};

/* mgmt.c: completes w with result. A blocked caller wakes now; an async
 * done() is deferred to the top of the loop, where no table is being walked
 * and it may call back into mgmt. */
void mgmt_waiter_done(struct mgmt *m, struct waiter *w, int result);

/* mgmt.c: before rpc reaches or answers past loopback (addr: where to, or
 * what a listener is bound to): moves the control sockets and rpc's
 * datapath to the wildcard, once. */
void mgmt_reach(struct mgmt *m, struct rpc *rpc, const struct mgmt_addr *addr);

/* mgmt_session.c */
void mgmt_connect_start(struct mgmt *m, struct rpc *rpc, const struct mgmt_addr *addr, unsigned flags,
			struct waiter *w, uint64_t now);
void mgmt_on_datagram(struct mgmt *m, int fd, struct listener *l, const uint8_t *buf, size_t len,
		      const struct sockaddr *src, socklen_t srclen, uint64_t now);
/* An ICMP error (err, a positive errno) for a datagram sent to dest. */
void mgmt_on_icmp_error(struct mgmt *m, const struct mgmt_addr *dest, int err);
/* The peer process watched by pidfd is gone. */
void mgmt_on_peer_exit(struct mgmt *m, int pidfd, uint64_t now);
/* Writes the pidfds of watched peers into pfd (room for m->npidfds). */
size_t mgmt_peer_pidfds(struct mgmt *m, struct pollfd *pfd);
/* Runs retries, heartbeats and failure checks that are due; returns the
 * poll timeout in ms until the next one. */
int mgmt_timers(struct mgmt *m, uint64_t now);
void mgmt_sess_disconnect(struct mgmt *m, struct rpc *rpc, int session, uint64_t now);
/* Closes rpc's sessions on both sides and cancels its connects. */
void mgmt_sess_forget(struct mgmt *m, struct rpc *rpc, uint64_t now);
/* At stop: cancels connects, tells peers, frees every table entry. */
void mgmt_sess_shutdown(struct mgmt *m);
/* Where session's peer is reached (its control or rendezvous socket). */
int mgmt_sess_peer_addr(struct mgmt *m, struct rpc *rpc, int session, struct mgmt_addr *out);

#endif
