/*
 * An RPC endpoint (eRPC's Rpc): sessions to peer endpoints, request handlers
 * by type, continuations, and the event loop that moves packets.
 *
 * Threading: an endpoint is single-threaded. Every function here except
 * rpc_create/rpc_destroy/rpc_lock/rpc_trylock must be called with the
 * endpoint's lock held. Handlers and continuations run inside rpc_run_once()
 * with the lock held and may call any function here (enqueue, respond,
 * alloc, free, session reset) but must not block.
 *
 * Errors are negative errno values.
 */
#ifndef FERRY_RPC_H
#define FERRY_RPC_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "transport/msgbuf.h"
#include "transport/nic.h"

struct ferry_config;
struct ferry_stats;
struct rpc;
struct rpc_req;

/*
 * A request arrived. The request's msgbuf (rpc_req_msg) is valid only until
 * the handler returns; the handle itself stays valid until rpc_respond(), so
 * a handler may return and respond later (even after enqueueing requests of
 * its own). The transport runs each request at most once: duplicates are
 * answered from the saved response.
 */
typedef void (*rpc_handler_fn)(struct rpc *rpc, struct rpc_req *req, void *ctx);

/*
 * A request completed. status is 0 with resp the response (valid only during
 * the call), or a negative errno with resp NULL: -ECONNRESET when the session
 * was reset or its peer declared dead, -ENOTCONN when it closed. The request
 * msgbuf passed to rpc_enqueue_request is the caller's again from this call on.
 */
typedef void (*rpc_cont_fn)(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag);

enum rpc_session_event {
	RPC_SESSION_UP,    /* routing installed, requests flow */
	RPC_SESSION_RESET, /* peer dead or reset: pending requests completed with err */
	RPC_SESSION_CLOSED /* closed by either side */
};
typedef void (*rpc_session_fn)(struct rpc *rpc, int session, enum rpc_session_event ev, int err,
			       void *ctx);

/*
 * Creates an endpoint on an open nic (the endpoint then owns and closes it).
 * cfg and stats must outlive the endpoint. Returns NULL with *err set and a
 * message in msg.
 */
struct rpc *rpc_create(struct nic *nic, const struct ferry_config *cfg, struct ferry_stats *stats,
		       int *err, char *msg, size_t msglen);
/* Resets every session (continuations run with -ECONNRESET), frees everything. */
void rpc_destroy(struct rpc *rpc);

void rpc_lock(struct rpc *rpc);
bool rpc_trylock(struct rpc *rpc);
void rpc_unlock(struct rpc *rpc);

/* Registers the handler for req_type (0..255). -EEXIST if one is there. */
int rpc_register_handler(struct rpc *rpc, uint8_t req_type, rpc_handler_fn fn, void *ctx);

/*
 * Takes a request's bytes as its packets arrive, in order and each once,
 * where the handler would copy them on from a reassembled msgbuf (a stream's
 * receive ring): one copy fewer per byte. off counts from the request's
 * first byte; head holds its first head_len bytes (the caller's header,
 * which the first packet carries). A nonzero return is kept for the handler
 * (rpc_req_placed), and the request's later packets are not offered.
 */
typedef int (*rpc_place_fn)(struct rpc *rpc, int session, const uint8_t *head, uint32_t off,
			    const uint8_t *data, uint32_t len, void *ctx);
#define RPC_PLACE_HEAD_MAX 32u
/* For requests of req_type that span packets; the handler still runs at the
 * end, with a msgbuf of the head_len header bytes only. -EINVAL if head_len
 * is over RPC_PLACE_HEAD_MAX or no handler is registered. */
int rpc_register_placer(struct rpc *rpc, uint8_t req_type, rpc_place_fn fn, uint32_t head_len);
void rpc_set_session_handler(struct rpc *rpc, rpc_session_fn fn, void *ctx);

/* A msgbuf with room for size bytes (data_size = size), or NULL if size is
 * over RPC_MAX_MSG_SIZE or memory ran out. */
struct msgbuf *rpc_alloc_msg(struct rpc *rpc, uint32_t size);
void rpc_free_msg(struct rpc *rpc, struct msgbuf *m);

/*
 * Sends req (req->data_size bytes) on session as a request of req_type and
 * calls cont(tag) when the response arrives or the request fails. Never
 * blocks: when the session's slots are all busy the request waits in the
 * session's backlog. The transport owns req until cont runs.
 * Returns 0, -ENOTCONN (no such session, or not up), -EMSGSIZE.
 */
int rpc_enqueue_request(struct rpc *rpc, int session, uint8_t req_type, struct msgbuf *req,
			rpc_cont_fn cont, void *tag);

const struct msgbuf *rpc_req_msg(const struct rpc_req *req);
uint8_t rpc_req_type(const struct rpc_req *req);
int rpc_req_session(const struct rpc_req *req);
/* The request's size in bytes (rpc_req_msg holds only the header when a
 * placer took the bytes). */
uint32_t rpc_req_size(const struct rpc_req *req);
/* Whether a placer took the request's bytes; *status is its first nonzero
 * return, or 0. */
bool rpc_req_placed(const struct rpc_req *req, int *status);

/* The buffer to write the response into, sized to size bytes (the slot's
 * preallocated buffer when it fits). Owned by the transport. NULL on -ENOMEM
 * or size over RPC_MAX_MSG_SIZE. Call at most once per request. */
struct msgbuf *rpc_resp_msg(struct rpc *rpc, struct rpc_req *req, uint32_t size);
/* Sends the response written into rpc_resp_msg's buffer; req is invalid after. */
void rpc_respond(struct rpc *rpc, struct rpc_req *req);

/* One pass of the event loop: receive, run handlers and continuations,
 * transmit, check timers. Returns the number of packets handled. */
unsigned rpc_run_once(struct rpc *rpc);
/* Sends what requests and responses have queued (and paced packets now due)
 * without receiving: one transmit system call at most. */
void rpc_flush(struct rpc *rpc);
/* Runs the event loop for at least us microseconds. */
void rpc_run_for_us(struct rpc *rpc, uint64_t us);
/* Whether any request is in flight or queued (timers must keep running). */
bool rpc_busy(const struct rpc *rpc);
/* As rpc_busy, leaving out sessions whose peer is gone (rpc_session_peer_gone):
 * what waits only on those will never be answered. */
bool rpc_busy_with_live_peers(const struct rpc *rpc);
/* The clock (clock_now_ns) as the last pass read it: an idle pass reads it
 * only now and then, so it may lag by a few passes. */
uint64_t rpc_pass_clock(const struct rpc *rpc);
/* Reads the clock for the next pass: one that comes only once a tick (a
 * background thread's) would otherwise see its timers a dozen ticks late. */
void rpc_clock_update(struct rpc *rpc);

/* Sleeping: rpc_arm_notify() then poll(rpc_notify_fd()) if it returned 0. */
int rpc_notify_fd(const struct rpc *rpc);
int rpc_arm_notify(struct rpc *rpc);
/* Whether the nic's last receive system call found nothing left and no
 * wake-up was taken since it began (nic_rx_drained): a sleep on
 * rpc_notify_fd() ends at once for anything since, so a look before it
 * would only cost a system call. Without the lock. */
bool rpc_rx_drained(const struct rpc *rpc);
/* A thread took a wake-up from rpc_notify_fd(): until a look begins after
 * this, rpc_rx_drained() says no. Without the lock. */
void rpc_rx_notified(struct rpc *rpc);
/* Whether each look at the nic is a system call (nic.h rx_syscall). */
bool rpc_rx_syscall(const struct rpc *rpc);

/* --- Session management, for mgmt/ (lock held). --- */

/* Allocates a session in state CONNECTING with the given token. Returns its
 * number (>= 0) or -errno. */
int rpc_session_create(struct rpc *rpc, uint64_t token);
/*
 * Installs the peer: its route (already fixed up), its session number, and
 * the payload per packet both sides agreed on (>= RPC_MIN_PKT_DATA, <=
 * rpc_max_pkt_data of both). The session is up afterwards.
 */
int rpc_session_connect(struct rpc *rpc, int session, const struct nic_route *peer,
			uint16_t peer_session, uint32_t data_per_pkt);
/* Fails every request pending on the session with err, then frees it. */
void rpc_session_reset(struct rpc *rpc, int session, int err);
bool rpc_session_is_up(const struct rpc *rpc, int session);
/* Whether the nic knows the session's peer endpoint is gone (udp: its port
 * refused a datagram): nothing sent on the session will be answered. */
bool rpc_session_peer_gone(const struct rpc *rpc, int session);
uint64_t rpc_session_token(const struct rpc *rpc, int session);
/* When a valid packet of the session last came in (clock_now_ns), 0 if
 * never: traffic proves the peer lives even when its management thread is
 * slow to answer pings. */
uint64_t rpc_session_rx_ns(const struct rpc *rpc, int session);
/* Where the session's handshake came from (the peer's proven network
 * address; its port means nothing): set by mgmt before the session is up,
 * for the stream layer, which shows it to applications instead of the
 * address a peer claims. rpc_session_origin returns its length, 0 when
 * unknown. */
void rpc_session_set_origin(struct rpc *rpc, int session, const struct sockaddr *sa,
			    socklen_t len);
socklen_t rpc_session_origin(const struct rpc *rpc, int session, struct sockaddr_storage *out);

/* What ferry-stat shows of a session. */
struct rpc_session_info {
	int num;
	uint16_t peer_num;
	bool up;
	uint64_t rtt_ns;   /* the last round-trip sample, 0 before one */
	uint64_t rate_bps; /* bytes per second Timely allows (the link's when
			      uncongested or without congestion control) */
	uint32_t credits_used, credits_max;
	uint32_t busy_slots, backlog; /* requests in flight, waiting for a slot */
	uint64_t retransmits, drops;
	struct sockaddr_storage origin; /* rpc_session_origin; origin_len 0: unknown */
	socklen_t origin_len;
};
/* The first session numbered *cursor or higher into out, *cursor past it;
 * false when there is none. Start with *cursor 0. */
bool rpc_session_next(const struct rpc *rpc, uint32_t *cursor, struct rpc_session_info *out);

void rpc_local_route(const struct rpc *rpc, struct nic_route *out);
struct nic *rpc_nic(const struct rpc *rpc);
/* Payload bytes per packet this endpoint can send and receive. */
uint32_t rpc_max_pkt_data(const struct rpc *rpc);
/* Payload bytes per packet on session (agreed with its peer), or
 * rpc_max_pkt_data before it is connected. */
uint32_t rpc_session_pkt_data(const struct rpc *rpc, int session);

/*
 * In a handler or a continuation run by a packet's arrival: keeps that
 * packet's receive buffer past the pass, so len bytes at data, which must
 * lie in it, stay readable there until rpc_release_rx. Returns the
 * buffer's handle, or NULL (data is not in the packet, the nic has no
 * buffers to spare, or no packet is being received): then copy the bytes.
 */
void *rpc_keep_rx(struct rpc *rpc, const void *data, size_t len);
/* Gives a kept buffer back to the nic, under the lock. */
void rpc_release_rx(struct rpc *rpc, void *buf);
/* Buffers kept now, and how many the nic lets the endpoint keep. */
unsigned rpc_rx_kept(const struct rpc *rpc);
unsigned rpc_rx_keep_max(const struct rpc *rpc);

/* Writes the endpoint's sessions and slots, for diagnostics. */
void rpc_dump(struct rpc *rpc, FILE *out);

/* Tests (under the lock): the next n packets to arrive are dropped, as
 * FERRY_FAULT drops them (counted as drop_fault). */
void rpc_fault_drop_next(struct rpc *rpc, unsigned n);

#endif
