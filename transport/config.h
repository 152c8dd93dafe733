/* Process-wide ferry settings, read once from FERRY_* environment variables. */
#ifndef FERRY_CONFIG_H
#define FERRY_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The datapaths; their names and openers are in one table, nic_transports
 * (transport/nic.h). */
enum ferry_transport_kind {
	FERRY_TRANSPORT_AUTO,
	FERRY_TRANSPORT_UDP,
	FERRY_TRANSPORT_IB,
	FERRY_TRANSPORT_SOFTIB,
	FERRY_TRANSPORT_TEST, /* in-process test nic, for protocol tests only */
};

enum ferry_log_level {
	FERRY_LOG_ERROR,
	FERRY_LOG_WARN,
	FERRY_LOG_INFO,
	FERRY_LOG_DEBUG,
};

/*
 * auto: Timely and pacing on datapaths with a switched fabric (ib), where
 * RTT growth means queueing. Over kernel UDP and softib the RTT is the
 * receiver's CPU time, and the credit window already bounds what is in
 * flight: pacing there only slows transfers down (measured: 1 MB transfers
 * over loopback UDP at about a sixth of the rate).
 */
enum ferry_cc_mode { FERRY_CC_AUTO, FERRY_CC_ON, FERRY_CC_OFF };

/*
 * UDP segmentation offload (nic_udp_gso.c): auto uses it where the kernel
 * takes the socket options and says so at info level where it does not; on
 * says that as a warning, as it was asked for; off never tries.
 */
enum ferry_udp_gso_mode { FERRY_UDP_GSO_AUTO, FERRY_UDP_GSO_ON, FERRY_UDP_GSO_OFF };

/* Test-only fault injection on the receive path (FERRY_FAULT). */
struct ferry_fault_config {
	double drop, dup, reorder; /* probabilities in [0, 1] */
	uint64_t seed;
};

struct ferry_config {
	enum ferry_transport_kind transport; /* FERRY_TRANSPORT */
	char peers[1024];                   /* FERRY_PEERS, "host:port,..." */
	enum ferry_log_level log_level;     /* FERRY_LOG */
	char log_file[512];                 /* FERRY_LOG_FILE */
	char stats_path[512];               /* FERRY_STATS */

	unsigned session_slots;             /* FERRY_SLOTS: requests in flight per direction */
	unsigned session_credits;           /* FERRY_CREDITS: packets in flight per direction;
	                                       0 = sized by bytes (ferry_session_credits) */
	unsigned rto_us;                    /* FERRY_RTO_US: retransmission timeout */
	unsigned failure_timeout_ms;        /* FERRY_FAILURE_TIMEOUT_MS */
	unsigned heartbeat_ms;              /* FERRY_HEARTBEAT_MS */
	unsigned connect_timeout_ms;        /* FERRY_CONNECT_TIMEOUT_MS: rendezvous answer */
	unsigned mtu;                       /* FERRY_MTU: packet size; 0 = path MTU */
	enum ferry_cc_mode congestion_control; /* FERRY_CC: Timely + pacing */
	double link_gbps;                   /* FERRY_LINK_GBPS: Timely's line rate */
	enum ferry_udp_gso_mode udp_gso;    /* FERRY_UDP_GSO */
	struct ferry_fault_config fault;    /* FERRY_FAULT */

	char device[64];                    /* FERRY_DEVICE: verbs device name, "" = first */
	unsigned ib_port;                   /* FERRY_IB_PORT: 0 = first active */
	int gid_index;                      /* FERRY_GID_INDEX: -1 = scan */
	char softib_fabric[128];            /* FERRY_SOFTIB_FABRIC */
};

/* Fills *cfg with defaults. */
void ferry_config_defaults(struct ferry_config *cfg);

/*
 * Unless FERRY_CREDITS says otherwise, a session keeps FERRY_CREDIT_BYTES
 * of packets in flight each way, as a byte window does: a single stream
 * then fills the link whatever the packet size. Measured across the
 * two-namespace veth at 1,500-byte packets (1,440 bytes of data each),
 * ferry-bench's 1 MB transfers ran at 15-16 Gbit/s with eRPC's 32 credits
 * (46 KB) and 24-28 Gbit/s with 128 (184 KB); iperf3 with a 1 MiB stream
 * window at 36.7 Gbit/s with 183 credits, 38.4 with 366, 41.2 with 728:
 * the bandwidth times the round trip, which on kernel UDP is mostly the
 * receiver's processing. Never fewer than two packets a slot (eRPC's 32
 * at least: big packets), never more than FERRY_CREDITS accepts.
 */
#define FERRY_CREDIT_BYTES (1024u << 10)
#define FERRY_CREDITS_MIN 32u
#define FERRY_CREDITS_MAX 1024u
/* The credits per session direction for packets of max_pkt_size bytes
 * (header included): FERRY_CREDITS if set, else as above. A session counts
 * at the packet size its ends agreed on; a nic that sizes its receive ring
 * by its own packet size caps them there (nic->max_session_credits). */
unsigned ferry_session_credits(const struct ferry_config *cfg, uint32_t max_pkt_size);

/*
 * FERRY_* variables another module owns (the interposer's: preload/config.h),
 * read in the same walk: set parses one of them into settings and returns 0,
 * -EINVAL with a message as ferry_config_refuse writes it, or -ENOENT when
 * name is not one of its own.
 */
struct ferry_config_owner {
	int (*set)(void *settings, const char *name, const char *value, char *err,
		   size_t errlen);
	void *settings;
};

/*
 * Reads every FERRY_* variable over the defaults: the transport's into cfg,
 * the others into their owners'. On a value it cannot use it returns -EINVAL
 * and writes into err a message naming the variable and what it accepts; a
 * FERRY_* name nobody owns is also refused, so typos do not pass silently
 * (a program that runs beside the interposer, ferry-doctor or ferry-bench,
 * reads through preload_config_from_env, so the interposer's names are
 * known there too). Does not allocate, so it is safe early in a preloaded
 * process.
 */
int ferry_config_from_env(struct ferry_config *cfg, const struct ferry_config_owner *owners,
			  unsigned n_owners, char *err, size_t errlen);

/* Parses one of the transport's variables as if it came from the
 * environment (tests); another name is refused as unknown. */
int ferry_config_set(struct ferry_config *cfg, const char *name, const char *value,
		     char *err, size_t errlen);

/* For owners' parsers: the refusal message ("NAME=VALUE is not usable: NAME
 * accepts ..."), returning -EINVAL; and the value syntaxes the transport's
 * variables use (0, or -1 when the value does not parse or is out of range). */
int ferry_config_refuse(char *err, size_t errlen, const char *name, const char *value,
			const char *accepts);
int ferry_config_parse_bool(const char *v, bool *out);
int ferry_config_parse_uint(const char *v, unsigned long lo, unsigned long hi,
			    unsigned long *out);

#endif
