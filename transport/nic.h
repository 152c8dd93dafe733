/*
 * The datapath interface under the RPC layer: a nic moves whole packets
 * (header + payload) to and from peers named by opaque routes. Back-ends:
 * nic_udp.c (kernel UDP), nic_ib.c (UD verbs, on real RDMA or on softib) and
 * nic_test.c (in-process, for protocol tests). Callers never test which one
 * they hold; they use the wrappers at the bottom of this file.
 *
 * A nic is single-threaded: its owner (one rpc endpoint, under that
 * endpoint's lock) makes every call.
 */
#ifndef FERRY_NIC_H
#define FERRY_NIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "transport/config.h"

struct ferry_stats;
struct verbs_api;

/* Where an endpoint can be reached; exchanged at session setup, opaque above the nic. */
#define NIC_ROUTE_BYTES 46
struct nic_route {
	uint8_t kind; /* enum ferry_transport_kind of the nic that made it */
	uint8_t len;  /* bytes used in data */
	uint8_t data[NIC_ROUTE_BYTES];
};
_Static_assert(sizeof(struct nic_route) == 48, "nic_route crosses the wire");

/* A resolved route: sockaddr for udp, address handle + QPN + QKey for ib. */
struct nic_peer;

/* A registered memory region (see nic_reg_mem). */
struct nic_mr {
	uint32_t lkey;
	void *handle;
};

/* One gather element of an outgoing packet. */
struct nic_sge {
	const void *addr;
	uint32_t len;
	uint32_t lkey;
};

/*
 * One outgoing packet: the concatenation of sge[0..nsge). sge[0] always
 * starts with the packet header. The memory must stay untouched until
 * nic_flush() returns or the owner otherwise knows the send completed.
 */
struct nic_tx {
	struct nic_peer *peer;
	uint8_t nsge; /* 1 or 2 */
	struct nic_sge sge[2];
};

/* One received packet, pointing into a receive buffer the nic owns. */
struct nic_rx {
	uint8_t *pkt;  /* starts with the packet header */
	uint32_t len;  /* bytes received */
	void *buf;     /* give back with nic_post_recvs() when done */
};

struct nic;

struct nic_ops {
	/* Queues up to n packets; returns how many were accepted (the rest are
	 * not sent: the caller treats them as lost). Never blocks. */
	unsigned (*tx_burst)(struct nic *nic, const struct nic_tx *pkts, unsigned n);
	/* Returns up to max received packets; never blocks. */
	unsigned (*rx_burst)(struct nic *nic, struct nic_rx *out, unsigned max);
	/* Returns receive buffers taken by rx_burst, in any order. */
	void (*post_recvs)(struct nic *nic, void *const *bufs, unsigned n);
	/* Waits until the nic holds no reference to any memory passed to tx_burst. */
	void (*flush)(struct nic *nic);
	/* An fd that polls readable when packets may be waiting (after arm_notify). */
	int (*notify_fd)(const struct nic *nic);
	/* Prepares the fd for sleeping; returns 1 if packets are already waiting
	 * (do not sleep), 0 if the caller may sleep on notify_fd, -errno. Drains
	 * any pending notification events itself. */
	int (*arm_notify)(struct nic *nic);
	/* Registers memory the nic will read from in tx_burst (and pins it if the
	 * nic needs that). Returns 0 or -errno. */
	int (*reg_mem)(struct nic *nic, void *addr, size_t len, struct nic_mr *out);
	void (*dereg_mem)(struct nic *nic, struct nic_mr *mr);
	/* Whether reg_mem locks pages (so RLIMIT_MEMLOCK applies). */
	bool (*pins_memory)(const struct nic *nic);
	/* This nic's own route, to send to peers at session setup. */
	void (*local_route)(const struct nic *nic, struct nic_route *out);
	/* Completes a peer's route with what the management channel saw of it
	 * (udp routes carry a port only; the host comes from here). */
	void (*route_fixup)(const struct nic *nic, struct nic_route *route,
			    const struct sockaddr *seen, socklen_t seen_len);
	int (*peer_create)(struct nic *nic, const struct nic_route *route, struct nic_peer **out);
	void (*peer_destroy)(struct nic *nic, struct nic_peer *peer);
	/* Human-readable route, for logs. */
	void (*route_format)(const struct nic_route *route, char *buf, size_t cap);
	void (*close)(struct nic *nic);
	/* Optional. Makes the nic reachable from other hosts where it started
	 * on loopback only (udp_bind.h); routes already given out stay valid.
	 * The notify fd keeps its number, but sleepers registered on it must
	 * register again. 0 or -errno; the nic is unchanged on failure. */
	int (*widen)(struct nic *nic);
	/* Optional. In a fork child: lets go of the sockets that receive for
	 * the parent, touching nothing else (the parent still runs the nic). */
	void (*forked_child)(struct nic *nic);
	/* Optional. Whether the peer's endpoint is known to be gone (its
	 * port refuses datagrams): what is in flight to it will never be
	 * answered. */
	bool (*peer_gone)(const struct nic *nic, const struct nic_peer *peer);
	/* Optional. The peer left a request unanswered past its timeout: the
	 * nic should learn from now on whether it is gone (peer_gone). */
	void (*peer_unanswered)(struct nic *nic, struct nic_peer *peer);
};

struct nic {
	const struct nic_ops *ops;
	const char *name;           /* "udp", "ib", "softib", "test" */
	uint32_t max_pkt_size;      /* bytes per packet on the wire, header included */
	bool switched_fabric;       /* packets cross switches whose queues Timely's
				       RTT signal measures (FERRY_CC=auto) */
	uint32_t max_session_credits; /* 0, or the credits a session may have at
					 most: its receive queue was sized for them */
	struct ferry_stats *stats;  /* counters the nic may bump (drops, pkts) */
	/* Receive buffers the endpoint may hold past a pass (rpc_keep_rx)
	 * without starving the receive side; 0 for none. */
	unsigned rx_keep_max;
	/* rx_burst is a system call (the kernel's socket), not a read of
	 * memory: a look that finds nothing has a price. */
	bool rx_syscall;
	/* Receive system calls begun, and the number of the last if it left
	 * nothing queued (else 0): then whatever came since woke notify_fd.
	 * Written under the endpoint lock by rx_burst; read without it.
	 * Datapaths that receive without a system call leave both 0. */
	uint64_t rx_looks, rx_empty_look;
	/* rx_looks as a thread took a wake-up from notify_fd (rpc_rx_notified):
	 * that wake-up's packets may still be queued if it ran no look. */
	uint64_t rx_notified_look;
};

typedef struct nic *nic_open_fn(const struct ferry_config *cfg, struct ferry_stats *stats,
				int *err, char *msg, size_t msglen);

/*
 * The one table of datapaths (nic.c): FERRY_TRANSPORT's values, their
 * kinds, what they are for and how each opens. The config parser, nic_open,
 * ferry-doctor --transports and so ferry-run's help all read it.
 */
struct nic_transport {
	const char *name;               /* FERRY_TRANSPORT's value; also nic->name */
	enum ferry_transport_kind kind;
	const char *description;        /* one line; NULL: not offered to users (test) */
	nic_open_fn *open;
};
extern const struct nic_transport nic_transports[];
extern const unsigned nic_n_transports;

/* The entry of that name or kind, or NULL. */
const struct nic_transport *nic_transport_find(const char *name);
const struct nic_transport *nic_transport_of(enum ferry_transport_kind kind);
/* The name of a kind ("?" for none). */
const char *nic_transport_name(enum ferry_transport_kind kind);
/* Writes the names offered to users, joined by sep, into buf (truncated to
 * cap, always terminated when cap > 0); returns the length it needed. Does
 * not allocate. */
size_t nic_transport_list(char *buf, size_t cap, const char *sep);

/*
 * Opens the datapath cfg->transport names (auto: ib when a verbs device is
 * usable, else udp). On failure returns NULL, sets *err to -errno and writes a
 * message that says what to change into msg.
 */
struct nic *nic_open(const struct ferry_config *cfg, struct ferry_stats *stats, int *err,
		     char *msg, size_t msglen);

/* Back-end constructors, for the table and for tests that want one directly. */
struct nic *nic_udp_open(const struct ferry_config *cfg, struct ferry_stats *stats, int *err,
			 char *msg, size_t msglen);
/* ib and softib as FERRY_TRANSPORT opens them (nic_verbs.c), or, built
 * without libibverbs, a clear refusal (nic_noverbs.c). */
nic_open_fn nic_verbs_open_ib, nic_verbs_open_softib;
/* The UD verbs datapath on a verbs provider: &verbs_api_ibverbs
 * (transport/verbs_seam.h) or &verbs_api_softib (compat/softib/softib.h). */
struct nic *nic_ib_open(const struct ferry_config *cfg, struct ferry_stats *stats,
			const struct verbs_api *api, int *err, char *msg, size_t msglen);

static inline unsigned nic_tx_burst(struct nic *n, const struct nic_tx *p, unsigned c)
{
	return n->ops->tx_burst(n, p, c);
}
static inline unsigned nic_rx_burst(struct nic *n, struct nic_rx *o, unsigned max)
{
	return n->ops->rx_burst(n, o, max);
}
static inline void nic_post_recvs(struct nic *n, void *const *bufs, unsigned c)
{
	n->ops->post_recvs(n, bufs, c);
}
static inline void nic_flush(struct nic *n) { n->ops->flush(n); }
static inline int nic_notify_fd(const struct nic *n) { return n->ops->notify_fd(n); }
static inline int nic_arm_notify(struct nic *n) { return n->ops->arm_notify(n); }
/* Whether the last look left nothing queued and no wake-up from notify_fd
 * was taken since it began: a sleep on notify_fd then stands for a look.
 * Without the endpoint lock. */
bool nic_rx_drained(const struct nic *n);
/* Records that a thread took a wake-up from notify_fd (any thread). */
void nic_rx_notified(struct nic *n);
static inline int nic_reg_mem(struct nic *n, void *a, size_t l, struct nic_mr *mr)
{
	return n->ops->reg_mem(n, a, l, mr);
}
static inline void nic_dereg_mem(struct nic *n, struct nic_mr *mr) { n->ops->dereg_mem(n, mr); }
static inline bool nic_pins_memory(const struct nic *n) { return n->ops->pins_memory(n); }
static inline void nic_local_route(const struct nic *n, struct nic_route *r)
{
	n->ops->local_route(n, r);
}
static inline void nic_route_fixup(const struct nic *n, struct nic_route *r,
				   const struct sockaddr *seen, socklen_t len)
{
	n->ops->route_fixup(n, r, seen, len);
}
static inline int nic_peer_create(struct nic *n, const struct nic_route *r, struct nic_peer **p)
{
	return n->ops->peer_create(n, r, p);
}
static inline void nic_peer_destroy(struct nic *n, struct nic_peer *p) { n->ops->peer_destroy(n, p); }
static inline bool nic_peer_gone(const struct nic *n, const struct nic_peer *p)
{
	return n->ops->peer_gone && p && n->ops->peer_gone(n, p);
}
static inline void nic_peer_unanswered(struct nic *n, struct nic_peer *p)
{
	if (n->ops->peer_unanswered && p)
		n->ops->peer_unanswered(n, p);
}
static inline void nic_route_format(const struct nic *n, const struct nic_route *r, char *b,
				    size_t cap)
{
	n->ops->route_format(r, b, cap);
}
static inline void nic_close(struct nic *n) { n->ops->close(n); }
static inline int nic_widen(struct nic *n) { return n->ops->widen ? n->ops->widen(n) : 0; }
static inline void nic_forked_child(struct nic *n)
{
	if (n->ops->forked_child)
		n->ops->forked_child(n);
}

#endif
