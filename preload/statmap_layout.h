/*
 * The bytes ferry-stat reads: one file per ferry process in /dev/shm,
 * "ferry-stat.UID.PID", mode 0600, mapped shared by the process and by any
 * reader. The header and the live counters come first (the process counts
 * straight into them: reading them asks nothing of it); the tables of
 * sessions, streams and listeners follow, written only when a reader asks
 * (req_seq) and the process answers (reply_seq). Readers and writer are
 * built from the same tree: a file whose magic, version or sizes differ is
 * another ferry's and is not read.
 */
#ifndef FERRY_PRELOAD_STATMAP_LAYOUT_H
#define FERRY_PRELOAD_STATMAP_LAYOUT_H

#include <stdint.h>

#include "transport/stats.h"

#define STATMAP_DIR "/dev/shm"
#define STATMAP_PREFIX "ferry-stat."
#define STATMAP_MAGIC 0x66727374u /* "frst" */
#define STATMAP_VERSION 1u
/* The file's size. tmpfs allocates pages as they are written, so a
 * process nobody reads holds the header's page and no more. */
#define STATMAP_SIZE (1u << 20)
/* The wake-up a reader sends after raising req_seq: an abstract unix
 * datagram socket "ferry-stat.UID.PID" the progress thread polls. */
#define STATMAP_WAKE_FMT "ferry-stat.%u.%d"

/* An address as the tables hold it: family 0 when there is none. */
struct statmap_addr {
	uint16_t family; /* AF_INET, AF_INET6 */
	uint16_t port;   /* host order */
	uint8_t addr[16];
};

struct statmap_session {
	int32_t num;
	uint16_t peer_num;
	uint8_t up;
	uint8_t pad;
	struct statmap_addr peer; /* the peer's proven address (port 0) */
	uint32_t credits_used, credits_max;
	uint32_t busy_slots, backlog;
	uint64_t rtt_ns, rate_bps;
	uint64_t retransmits, drops;
};

/* Stream states, in enum stream_stat_state's order (preload/stream.h). */
#define STATMAP_STREAM_STATES \
	{"opening", "open", "half-closed", "closing", "reset", "moving", "queued"}
#define STATMAP_NSTREAM_STATES 7

struct statmap_stream {
	uint32_t sid;
	int32_t session;
	uint32_t state;
	int32_t owner; /* pid: the process whose table this is */
	struct statmap_addr local, peer;
	uint64_t bytes_tx, bytes_rx, unread, unacked;
};

struct statmap_listener {
	struct statmap_addr addr;
	uint32_t queued, offers;
	int32_t backlog;
	uint32_t shared;
	uint64_t inode; /* the listening socket's: who else holds it (/proc/PID/fd) */
};

struct statmap_hdr {
	uint32_t magic, version;
	uint32_t size, hdr_size;
	uint32_t stats_size, rec_sizes; /* sizeof(struct ferry_stats); table record sizes */
	int32_t pid;
	uint32_t uid;
	uint64_t start_time; /* /proc/PID/stat's: tells a later process with our pid */
	uint64_t net_ns;     /* network namespace inode: where the wake-up socket lives */
	char program[64];
	char transport[16];
	/* Readers add one (atomically) and wake the process, which writes the
	 * tables and stores the req_seq it saw in reply_seq. */
	uint64_t req_seq, reply_seq;
	/* The tables' seqlock: odd while they are written. */
	uint32_t gen;
	uint32_t n_sessions, n_streams, n_listeners; /* written */
	uint32_t more;           /* entries left out for want of room */
	uint32_t pad;
	uint64_t tables_realtime_ns; /* when they were written (CLOCK_REALTIME) */
	struct ferry_stats stats;    /* live: the process counts here */
};

#define STATMAP_REC_SIZES                                                       \
	((uint32_t)(sizeof(struct statmap_session) | sizeof(struct statmap_stream) << 8 | \
		    sizeof(struct statmap_listener) << 16))

_Static_assert(sizeof(struct statmap_addr) == 20, "statmap layout");
_Static_assert(sizeof(struct statmap_session) == 80 && sizeof(struct statmap_stream) == 88,
	       "statmap layout");
_Static_assert(sizeof(struct statmap_hdr) % 8 == 0, "statmap layout");

/* The tables: sessions, then streams, then listeners, each n_* long. */
static inline struct statmap_session *statmap_sessions(struct statmap_hdr *h)
{
	return (struct statmap_session *)(void *)((char *)h + h->hdr_size);
}
static inline struct statmap_stream *statmap_streams(struct statmap_hdr *h)
{
	return (struct statmap_stream *)(void *)(statmap_sessions(h) + h->n_sessions);
}
static inline struct statmap_listener *statmap_listeners(struct statmap_hdr *h)
{
	return (struct statmap_listener *)(void *)(statmap_streams(h) + h->n_streams);
}

#endif
