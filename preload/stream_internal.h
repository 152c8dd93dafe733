/*
 * What the stream module's files share, and nothing else includes:
 * stream.c (the table, readiness, lifecycle), stream_data.c (the data
 * path and its answers), stream_open.c (opening), stream_move.c (moving to
 * another process), listener.c (the accept queues). Everything here runs
 * under the endpoint lock unless it says otherwise.
 */
#ifndef FERRY_PRELOAD_STREAM_INTERNAL_H
#define FERRY_PRELOAD_STREAM_INTERNAL_H

#include <stddef.h>
#include <sys/types.h>

#include "preload/listener.h"
#include "preload/stream.h"
#include "preload/stream_wire.h"
#include "transport/rpc.h"

/* Receive window per stream, and the largest DATA request. A DATA request
 * this size is 45 packets at a 1,472-byte MTU: enough to amortise the
 * per-request cost, small enough that several fit the window at once. */
#define STREAM_WINDOW (512u << 10)
#define STREAM_DATA_MAX (64u << 10)
#define SID_INDEX_BITS 20
#define SID_INDEX_MASK ((1u << SID_INDEX_BITS) - 1)

/* A request of ours in flight, the tag its continuation gets. */
struct stream_tx {
	struct stream *s;
	struct msgbuf *m;
	uint32_t len;     /* DATA bytes carried */
	unsigned attempt; /* OPEN: s->redirects when it was sent */
	struct stream_tx *next_spare;
};

struct stream_table {
	/* Streams by index: a stream id is its index and the slot's generation. */
	struct stream **slots;
	uint16_t *gen;
	uint32_t *free;
	uint32_t cap, used, nfree;
	unsigned nmoving; /* streams moving at the peer's word */
	unsigned ntimed;  /* atomic: streams with keepalive or a user timeout */
	/* Streams holding a DATA answer, streams owing an acknowledgement,
	 * client streams to open elsewhere: lists that hold a reference each;
	 * an entry whose reason went away is dropped when next walked. */
	struct stream *held_head, *owed_head, *redirect_head;
	int work;        /* atomic: a list is non-empty or a stream moving (a hint) */
	unsigned nheld;  /* atomic: streams whose held answer is still unsent */
	bool tx_pending; /* requests queued since stream_take_tx_pending */
	/* DATA waits for the application's next wait (epoll_wait, poll, a
	 * blocking call) so replies to many connections leave in one batch.
	 * Atomic: read without the lock. */
	bool tx_deferred;
};
extern struct stream_table streams;

/* stream_data.c */
void stream_tx_free(struct stream_tx *tx);

/* stream_urgent.c */
/* The byte at seq, just received, is the peer's new urgent mark. */
void stream_urgent_arrived(struct stream *s, uint64_t seq);
/* Where a read from rx.head may go: skip bytes first (the mark's, out of
 * line), then at most max (up to the mark). */
void stream_urgent_bounds(const struct stream *s, size_t *skip, size_t *max);
/* After a read: a mark read past is gone. */
void stream_urgent_passed(struct stream *s);
/* The next byte is the urgent one and not in line: not readable alone. */
bool stream_urgent_hides_byte(const struct stream *s);

/* stream.c */
struct stream *stream_alloc(struct rpc *rpc, int session);
struct stream *stream_lookup(uint32_t sid, int session);
void stream_put(struct stream *s);
/* Tells the file's owner its readiness (stream_init's callback). */
void stream_ready(struct ffile *file, uint32_t mask, uint32_t events);
void stream_notify(struct stream *s, uint32_t events);
/* The peer's FIN is in, every byte before it too (SOCK_DONE in TCP). */
bool stream_fin_in(const struct stream *s);
/* The peer's FIN is in, or our read side is shut: reads say EOF. */
bool stream_eof(const struct stream *s);
void stream_fail(struct stream *s, int err);
/* What a message to the peer says about our receive side. */
void stream_tell(struct stream *s, uint64_t *consumed, uint64_t *received);
/* The peer's word on our direction: how far it has read and received. */
void stream_heard(struct stream *s, uint64_t consumed, uint64_t received);
/* A closed stream waiting for the peer's side lets go once it ended. */
void stream_unlinger(struct stream *s);
void stream_work_update(void);
static inline void stream_defer_tx(void)
{
	__atomic_store_n(&streams.tx_deferred, true, __ATOMIC_RELEASE);
}
/* Lets go of what waited too long: lingering closed streams, streams
 * whose new owner never attached. */
void stream_expire(struct rpc *rpc);

/* stream_end.c: how a stream ends when its session goes away, as kernel
 * TCP would have ended it. */
/* Whether s outlives its session: the peer is handing it to another
 * process, which continues it on a session of its own (stream_restore),
 * so the old owner's end is not the stream's. */
bool stream_end_moving(const struct stream *s);

/*
 * The error the stream fails with (0: a clean end, EOF after the bytes
 * already here) when its session ended with err (a negative errno,
 * mgmt.h): -EOWNERDEAD when the peer process is gone, whose kernel would
 * have closed its socket with a FIN, or with a RST where bytes of ours lay
 * unread there; -ETIMEDOUT when the peer stayed silent too long; anything
 * else is a reset. A peer that had shut its side and sent everything before
 * it went closed cleanly whatever the reason.
 */
int stream_end_error(const struct stream *s, int err);

/* Ends s as its session ended with err (stream_end_error). Where that is a
 * clean end, the peer's socket is gone all the same: as over the kernel,
 * the next write still leaves, and the reset it draws answers later calls
 * (stream_end_write). */
void stream_end(struct stream *s, int err);
/* That write: len bytes taken (and dropped); the stream has EPIPE to say. */
ssize_t stream_end_write(struct stream *s, size_t len);

/* stream_timeout.c */
/* Probes and expires the timed streams, every STREAM_TIMED_CHECK_NS. */
void stream_timed_check(struct rpc *rpc);
/* The peer spoke of s (received: its word on our bytes moved on). */
void stream_timed_heard(struct stream *s, bool received);
/* Our bytes start to wait for the peer. */
void stream_timed_sent(struct stream *s);
/* s goes away: no longer counted. */
void stream_timed_forget(struct stream *s);

/* stream_data.c */
/* A request of s's: its tag, with a message of len bytes (tx->m) to fill;
 * NULL when memory is short. */
struct stream_tx *stream_tx_new(struct rpc *rpc, struct stream *s, uint32_t len);
/* Queues tx as a type request on s's session, holding a reference to s
 * until cont; on failure frees tx and returns -errno. */
int stream_tx_send(struct rpc *rpc, struct stream_tx *tx, uint8_t type, rpc_cont_fn cont);
/* The peer's answer in resp when the request was answered and it is one. */
static inline const struct wire_ack *stream_ack_of(int status, const struct msgbuf *resp)
{
	return status == 0 && resp->data_size >= sizeof(struct wire_ack) ? (const void *)resp->buf
									  : NULL;
}
int stream_send_ctl(struct rpc *rpc, struct stream *s, uint8_t type, uint64_t value,
		    rpc_cont_fn cont);
void stream_ctl_cont(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag);
void stream_respond_ack(struct rpc *rpc, struct rpc_req *req, int status, struct stream *s);
bool stream_answer_held(struct rpc *rpc, struct stream *s, uint32_t flags,
			const struct iovec *iov, int iovcnt, size_t len);
int stream_send_fin(struct rpc *rpc, struct stream *s);
/* The segment a DATA, control or MOVE request opens with, or NULL when
 * the request is too short for one (answered -EPROTO). */
const struct wire_seg *stream_request_seg(struct rpc *rpc, struct rpc_req *req);
/* Forgets the answers queued for after the pass (stream_forget_all). */
void stream_data_forget(void);
/* Sets up how kept receive buffers go back (stream_init). */
void stream_data_init(void);
void stream_handle_data(struct rpc *rpc, struct rpc_req *req, void *ctx);
int stream_place_data(struct rpc *rpc, int session, const uint8_t *head, uint32_t off,
		      const uint8_t *data, uint32_t len, void *ctx);
void stream_handle_ctl(struct rpc *rpc, struct rpc_req *req, void *ctx);

/* stream_open.c */
/* OPEN again at a fresh rendezvous; false when s cannot go again. */
bool stream_open_again(struct stream *s);
void stream_handle_open(struct rpc *rpc, struct rpc_req *req, void *ctx);

/* stream_move.c */
void stream_handle_move(struct rpc *rpc, struct rpc_req *req, void *ctx);
void stream_handle_attach(struct rpc *rpc, struct rpc_req *req, void *ctx);

/* listener.c */
/* The listener an OPEN for dst lands on, or NULL. */
struct listener *listener_match(const struct wire_addr *dst);
/* Whether dst names a shared listener this process let go of. */
bool listener_gone(const struct wire_addr *dst);
/* Whether l's accept queue takes another stream. */
bool listener_has_room(const struct listener *l);
/* Queues s (its reference) for accept; l's file turns readable. */
void listener_enqueue(struct listener *l, struct stream *s);
/* Frees every listener without a word to anyone (stream_forget_all). */
void listener_forget_all(void);

#endif
