/*
 * The rpc endpoint's insides, shared by rpc.c (endpoint and event loop),
 * session.c, rpc_client.c (our requests), rpc_server.c (peer's requests)
 * and rpc_tx.c (batching and pacing). Nothing outside transport/ includes it.
 *
 * Per session and direction, eRPC's client-driven protocol: a requester
 * sends request packets and, once response packet 0 has told it the
 * response's size, a request-for-response (RFR) per further response
 * packet. Every such packet consumes one session credit and is answered by
 * exactly one packet (a credit return for request packets but the last, a
 * response packet otherwise), so a slot's sent packets and their answers
 * form one sequence, indexed 0..N+M-2 for an N-packet request and an
 * M-packet response. Go-back-N runs on that index: answers are accepted
 * only in order; a gap, a NACK or a timeout rewinds num_tx to num_rx.
 */
#ifndef FERRY_RPC_INTERNAL_H
#define FERRY_RPC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "transport/config.h"
#include "transport/fault.h"
#include "transport/msgbuf.h"
#include "transport/nic.h"
#include "transport/pkthdr.h"
#include "transport/pool.h"
#include "transport/rpc.h"
#include "transport/stats.h"
#include "transport/timely.h"
#include "transport/timing_wheel.h"

/* Server-side slots per session; a request lands on req_num % this. Client
 * slot counts are powers of two up to this, so outstanding requests never
 * share a server slot. */
#define RPC_SERVER_SLOTS 64u
#define RPC_TX_BATCH 32u
/* Freed sessions' send-time mappings an endpoint keeps for its next ones. */
#define RPC_TX_TIMES_SPARE 4u
#define RPC_RX_BATCH 32u
/* A responder sends a credit return for at most this many request packets. */
#define RPC_CR_EVERY 8u
#define RPC_CTRL_HDRS 4096u

/* A requester slot: one of our requests in flight on a session. */
struct client_slot {
	bool busy;
	bool rolled_back;  /* went back since the last in-order answer */
	bool probing;      /* after a timeout: one packet out until it is answered */
	uint8_t timeouts;  /* in a row without progress: the timeout doubles */
	bool flush_needed; /* retransmitted: the nic may still read req */
	uint64_t tx_batch;  /* the batch its last packet went into (rpc->tx_batch) */
	uint8_t req_type;
	uint32_t epoch;    /* bumped at each rollback and completion */
	uint64_t req_num;
	struct msgbuf *req;
	rpc_cont_fn cont;
	void *tag;
	uint32_t req_pkts;  /* N */
	uint32_t resp_pkts; /* M, 0 until response packet 0 arrived */
	uint32_t resp_size;
	struct msgbuf *resp; /* reassembly buffer for a multi-packet response */
	uint32_t num_tx;     /* packets of the sequence sent (or in the wheel) */
	uint32_t num_rx;     /* answers accepted, in order */
	uint32_t high_tx;    /* sequence indices below this were sent before:
				sending one again is a retransmission */
	uint32_t rtt_from;   /* high_tx at the last rollback: answers below it
				may be for either copy, so no RTT sample (Karn) */
	uint64_t progress_ns;
	uint64_t *tx_ns;     /* send time per sequence index, ring of credits */
};

enum server_slot_state {
	SRV_EMPTY,
	SRV_RECEIVING,  /* request packets arriving */
	SRV_IN_HANDLER, /* handler has it; response not yet given */
	SRV_RESPONDED,  /* response saved for duplicates and RFRs */
};

struct rpc_req {
	struct session *session;
	struct server_slot *slot;
	const struct msgbuf *msg; /* valid only while the handler runs */
};

/* A responder slot: the peer's latest request that maps here. */
struct server_slot {
	enum server_slot_state state;
	uint8_t req_type;
	bool resp_retransmitted;
	uint64_t req_num;
	uint32_t req_size;
	uint32_t req_pkts;
	uint32_t rx_pkts;      /* request packets received in order */
	uint32_t nacked_at;    /* rx_pkts when we last NACKed, to NACK once per gap */
	struct msgbuf *req;    /* reassembly buffer (multi-packet requests) */
	bool placed;           /* the type's placer takes the bytes instead */
	int place_status;      /* its first nonzero return */
	uint8_t head[RPC_PLACE_HEAD_MAX]; /* the first packet's header, for it */
	struct msgbuf *resp;   /* the response, kept until the next request */
	struct msgbuf *pre_resp; /* one-packet buffer reused across requests */
	bool cr_due;             /* listed in rpc->cr_due this pass */
	uint32_t cr_owed;        /* request packets received since the last
				    credit return (see owe_cr) */
	uint64_t tx_batch;       /* the batch its last response packet went into */
	uint32_t resp_pkts;
	struct rpc_req handle;
};

struct backlog_entry {
	uint8_t req_type;
	struct msgbuf *req;
	rpc_cont_fn cont;
	void *tag;
};

enum session_state { SESSION_CONNECTING, SESSION_UP, SESSION_DEAD };

struct session {
	uint16_t num;
	uint16_t peer_num;
	enum session_state state;
	uint64_t token;
	struct nic_peer *peer;
	uint32_t dpp; /* payload bytes per packet, agreed at setup */
	uint32_t credits;     /* packets we may still send */
	uint32_t credits_max; /* the session's credit window */
	uint32_t n_client_slots;
	uint32_t refs;  /* handlers holding requests of this session, and
			   the event loop while it calls out */
	bool zombie;    /* reset while held: on rpc->zombies until let go */
	struct session *zombie_next;
	struct client_slot *cslots;
	struct server_slot sslots[RPC_SERVER_SLOTS];
	struct backlog_entry *backlog;
	uint32_t backlog_head, backlog_len, backlog_cap;
	uint32_t busy_slots;
	/* Bit i: cslots[i] is busy. An answer or a timer visits the slots
	 * in flight, not all of them (FERRY_SLOTS is at most 64). */
	uint64_t busy_mask;
	struct timely timely;
	uint64_t next_tx_ns;   /* pacing: when the next paced packet may leave */
	uint64_t rx_ns;        /* a valid packet last came in (rpc_session_rx_ns) */
	struct sockaddr_storage origin; /* rpc_session_set_origin */
	socklen_t origin_len;
	struct session *active_next, *active_prev; /* on rpc->active while busy */
	bool on_active;
	/* For rpc_session_info (ferry-stat): plain stores under the lock, no
	 * clock read of their own. */
	uint64_t rtt_ns; /* the last round-trip sample, 0 before one */
	uint64_t retransmits, drops;
};

/* A drop charged to a session as well as to the process's counters. */
#define session_drop(rpc, s, reason)             \
	do {                                     \
		stats_drop((rpc)->st, reason);   \
		(s)->drops++;                    \
	} while (0)

struct rpc {
	pthread_mutex_t lock;
	struct nic *nic;
	const struct ferry_config *cfg;
	struct ferry_stats *st;
	struct pool *pool;
	uint32_t max_dpp;
	bool cc; /* Timely and pacing (FERRY_CC, the nic's fabric) */
	struct {
		rpc_handler_fn fn;
		void *ctx;
		rpc_place_fn place;
		uint32_t head_len;
	} handlers[256];
	rpc_session_fn session_fn;
	void *session_ctx;
	struct session **sessions;
	uint32_t n_sessions; /* capacity of sessions[] */
	struct session *zombies; /* reset, but a handler still holds a request */
	struct session *active; /* sessions with requests in flight */
	struct fault fault;
	uint8_t *held_pkt;     /* a packet FAULT_REORDER put aside */
	uint32_t held_len;
	bool has_held;
	/* The packet a handler runs on, while it may keep the packet's
	 * buffer (rpc_keep_rx): NULL between packets and under FERRY_FAULT,
	 * whose duplicates and reordering reuse a packet. */
	void *rx_buf;
	const uint8_t *rx_pkt;
	uint32_t rx_len;
	bool rx_buf_kept;
	unsigned rx_kept; /* buffers kept, not yet given back */
	struct timing_wheel *wheel;
	struct nic_tx tx[RPC_TX_BATCH];
	unsigned n_tx;
	uint64_t tx_batch; /* numbers batches, so a slot knows if its packets
			      still wait in rpc->tx (they do while equal) */
	/* Slots owed a credit return at the end of this receive pass: one
	 * answers every request packet received in it, not one each. */
	struct {
		uint16_t session;
		uint16_t slot;
	} cr_due[RPC_RX_BATCH];
	unsigned n_cr_due;
	struct pool_chunk *ctrl_chunk; /* headers of credit returns and RFRs */
	uint32_t ctrl_next;
	uint64_t now_ns;        /* cached per event loop pass */
	unsigned idle_passes;   /* passes since the clock was last read */
	uint64_t next_timer_ns; /* next retransmission scan */
	/* Send-time mappings of freed sessions, for the next ones: a process
	 * that meets a new peer per connection (the client of a
	 * fork-per-connection server) mapped and unmapped one each. */
	struct {
		void *map;
		size_t len;
	} tx_times_spare[RPC_TX_TIMES_SPARE];
	unsigned n_tx_times_spare;
};

/* session.c: the spare mappings go with the endpoint. */
void session_spares_free(struct rpc *rpc);

/* A retransmission, charged to the session as well as to the process. */
static inline void session_retransmit(struct rpc *rpc, struct session *s)
{
	stats_inc(rpc->st->retransmits);
	s->retransmits++;
}

/* rpc_tx.c */
void tx_packet(struct rpc *rpc, struct session *s, const void *hdr, uint32_t hdr_lkey,
	       const void *data, uint32_t data_len, uint32_t data_lkey);
void tx_flush(struct rpc *rpc);
void tx_ctrl(struct rpc *rpc, struct session *s, const struct pkt_info *info);
void tx_client_packet(struct rpc *rpc, struct session *s, struct client_slot *cs,
		      uint32_t idx);
void tx_reap_wheel(struct rpc *rpc);

/* session.c */
struct session *session_get(struct rpc *rpc, int num);
/* A reference keeps a session's memory alive across a callout that may reset
 * it; session_put frees a reset session when the last reference goes. */
static inline void session_hold(struct session *s) { s->refs++; }
void session_put(struct rpc *rpc, struct session *s);
/* Frees the sessions reset while a handler held one of their requests. */
void session_free_zombies(struct rpc *rpc);
void session_activate(struct rpc *rpc, struct session *s);
void session_deactivate(struct rpc *rpc, struct session *s);
void session_release_server_slot(struct rpc *rpc, struct server_slot *ss);

/* rpc_client.c */
void client_push_all(struct rpc *rpc, struct session *s);
void client_on_answer(struct rpc *rpc, struct session *s, const struct pkt_info *pi,
		      const uint8_t *data);
void client_check_timeouts(struct rpc *rpc);
void server_flush_crs(struct rpc *rpc);
void client_fail_all(struct rpc *rpc, struct session *s, int err);
void client_pump_backlog(struct rpc *rpc, struct session *s);

/* rpc_server.c */
void server_on_request(struct rpc *rpc, struct session *s, const struct pkt_info *pi,
		       const uint8_t *data);
void server_on_rfr(struct rpc *rpc, struct session *s, const struct pkt_info *pi);

/* rpc.c */
struct msgbuf *rpc_view_msg(struct msgbuf *view, const uint8_t *data, uint32_t size);

#endif
