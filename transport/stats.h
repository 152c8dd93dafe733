/* Per-process counters: proof of the path traffic took, readable while running. */
#ifndef FERRY_STATS_H
#define FERRY_STATS_H

#include <stddef.h>
#include <stdint.h>

/*
 * One list drives the struct and the JSON dump. Names are the JSON keys;
 * those starting with fallback_ and drop_ are also summed into "fallbacks"
 * and "drops" breakdown objects.
 */
#define FERRY_STATS_COUNTERS(X)                                                  \
	X(streams_connected)      /* client streams carried by ferry */            \
	X(streams_accepted)       /* server streams carried by ferry */            \
	X(opens_unreachable)      /* OPENs refused: the peer could not reach it */ \
	X(fallbacks)              /* connections handed to the kernel */           \
	X(fallback_no_answer)     /* no rendezvous answer: plain peer */           \
	X(fallback_refused)       /* rendezvous port unreachable (ICMP) */        \
	X(fallback_cached)        /* peer known to be plain from an earlier try */ \
	X(fallback_port_filtered) /* port outside FERRY_PORTS */                   \
	X(fallback_unavailable)   /* ferry could not start here (see log) */       \
	X(fallback_unsupported)   /* socket use ferry does not carry */            \
	X(streams_handed_over)    /* streams another process took over from us */ \
	X(streams_taken_over)     /* streams this process took over from another */ \
	X(sockets_passed)         /* ferry sockets sent over a unix socket, described */ \
	X(sockets_received)       /* ferry sockets received over a unix socket, taken up */ \
	X(kernel_accepts)         /* plain clients accepted on a ferry listener */ \
	X(listeners)              /* listeners answering rendezvous */            \
	X(listeners_plain)        /* listeners left to the kernel (see log) */    \
	X(bytes_tx)                                                                \
	X(bytes_rx)                                                                \
	X(pkts_tx)                                                                 \
	X(pkts_rx)                                                                 \
	X(requests_tx)                                                             \
	X(requests_rx)                                                             \
	X(retransmits)                                                             \
	X(pkts_paced)             /* sent through the timing wheel (Timely) */    \
	X(udp_gso_sends)          /* udp datagrams the kernel segmented (UDP_SEGMENT) */ \
	X(udp_gso_pkts)           /* packets those carried */                     \
	X(udp_gro_datagrams)      /* coalesced udp datagrams received (UDP_GRO) */ \
	X(udp_gso_unsupported)    /* the kernel refused UDP_SEGMENT or UDP_GRO at start */ \
	X(udp_gso_refused)        /* peers whose segmented send the kernel refused */ \
	X(drops)                                                                   \
	X(drop_short)                                                              \
	X(drop_magic)                                                              \
	X(drop_type)                                                               \
	X(drop_session)                                                            \
	X(drop_token)                                                              \
	X(drop_size)                                                               \
	X(drop_number)                                                             \
	X(drop_fault)                                                              \
	X(drop_nomem)                                                              \
	X(drop_bundle)            /* malformed udp bundle datagram */             \
	X(drop_gro)               /* coalesced udp datagram that cannot be split */ \
	X(sessions)                                                                \
	X(sessions_closed)                                                         \
	X(dead_peers)                                                              \
	X(mgmt_drops)                                                              \
	X(bytes_rx_kept)          /* received bytes read from where they landed, not copied twice */

struct ferry_stats {
#define FERRY_STATS_FIELD(name) uint64_t name;
	FERRY_STATS_COUNTERS(FERRY_STATS_FIELD)
#undef FERRY_STATS_FIELD
};

/* Counters are bumped from several threads without locks. */
static inline void stats_add(uint64_t *counter, uint64_t n)
{
	__atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}
#define stats_inc(counter) stats_add(&(counter), 1)

/* Bumps drops and the named drop_ reason together. */
#define stats_drop(st, reason)                       \
	do {                                         \
		stats_inc((st)->drops);              \
		stats_inc((st)->drop_##reason);      \
	} while (0)

/*
 * Writes the counters as one JSON object followed by a newline into buf.
 * Returns the length, or -ENOSPC if buf is too small.
 */
int stats_format_json(const struct ferry_stats *st, const char *transport, char *buf,
		      size_t cap);

/*
 * Writes the JSON object to path, where "%p" becomes the process id; the file
 * is replaced atomically (written aside, then renamed). Returns 0 or -errno.
 */
int stats_write_file(const struct ferry_stats *st, const char *transport, const char *path);

#endif
