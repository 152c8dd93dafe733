/*
 * Streams: a TCP byte stream carried as requests on a session (OPEN, DATA,
 * WINDOW, FIN, RESET). Each stream keeps its own sequence numbers and
 * receive window, so streams sharing a session never wait for each other,
 * and its memory is bounded by the window.
 *
 * Every function here runs with the endpoint lock held (ferry_lock), and
 * none blocks: a caller that has to wait sleeps on the stream's file.
 * Errors are negative errno.
 */
#ifndef FERRY_PRELOAD_STREAM_H
#define FERRY_PRELOAD_STREAM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "mgmt/mgmt.h"
#include "preload/rxbuf.h"

struct ffile;
struct rpc;

/* Request types on the endpoint. */
enum {
	STREAM_REQ_OPEN = 0x20,
	STREAM_REQ_DATA,
	STREAM_REQ_WINDOW,
	STREAM_REQ_FIN,
	STREAM_REQ_RESET,
	STREAM_REQ_MOVE,   /* owner -> peer: the stream moves to another process */
	STREAM_REQ_ATTACH, /* new owner -> peer, on a session of its own */
};

enum stream_state {
	STREAM_OPENING, /* OPEN sent, no answer yet */
	STREAM_OPEN,
	STREAM_FAILED,  /* refused or reset: err says why */
};

struct stream {
	uint32_t sid, peer_sid;
	struct rpc *rpc; /* the endpoint that carries it */
	int session;
	uint64_t token;
	struct ffile *file;   /* the application's file; NULL once closed */
	int refs;             /* file + requests in flight + accept queue */
	enum stream_state state;
	int err;              /* reported once by the next call, then cleared */
	bool reset;           /* no traffic any more (reset, dead peer) */
	bool established;     /* a client's OPEN was taken: connect succeeded */
	bool rx_fin;          /* peer shut its write side at fin_seq */
	uint64_t fin_seq;
	bool rd_shut, wr_shut, fin_sent;
	/* Our FIN went in an answer, which comes again only as the answer to
	 * the peer's retransmitted request: an exit sends it as a request. */
	bool fin_in_answer;
	struct rxbuf rx;
	uint64_t rx_advertised; /* rx.head as the peer last heard it */
	uint64_t rx_told;       /* rx.tail as the peer last heard it */
	struct rpc_req *held;   /* the peer's DATA whose answer waits for our reply */
	bool on_held, on_owed;  /* on the held / acks-owed lists */
	uint64_t owed_since;    /* when bytes came that the peer has not heard of */
	struct stream *held_next, *owed_next;
	uint64_t tx_seq, tx_acked;
	uint64_t tx_delivered; /* bytes the peer has received (not read) */
	uint32_t peer_window;
	unsigned inflight;
	struct sockaddr_storage local, peer;
	socklen_t local_len, peer_len;
	/* A bound pooled placeholder (phpool.h) holding local's port, handed
	 * over at close: pooled again only once the stream is gone and both
	 * directions ended (else closed), so the port is never seen on two
	 * connections at once, here or at the peer. -1: none. */
	int ph_fd;
	bool ended;   /* the peer's direction is over: its FIN, or a reset */
	bool write_draws_reset; /* ended cleanly, the peer's socket gone (stream_end) */
	bool end_clean;         /* its session ended as a FIN would end it (stream_end) */
	/* SO_KEEPALIVE and TCP_USER_TIMEOUT (stream_set_timeouts), for a peer on
	 * another host; 0: off. */
	uint64_t ka_idle_ns;  /* silence before a probe */
	uint64_t ka_wait_ns;  /* how long a probe may go unanswered */
	uint64_t user_timeout_ns;
	uint64_t heard_ns;    /* the peer last spoke of this stream */
	uint64_t probe_ns;    /* a probe went then, unanswered; 0: none */
	uint64_t tx_wait_ns;  /* our bytes have waited for the peer since; 0: none */
	bool timed;           /* counted in streams.ntimed */
	bool ph_wait; /* closed, holding a reference for ph_fd until ended */
	uint64_t closed_ns; /* when ph_wait began (CLOCK_MONOTONIC_COARSE) */
	struct stream *accept_next;
	/* Moving between processes (see stream_move_out): */
	uint32_t born_fork;   /* stream_forks when it was made */
	bool moving;          /* nothing goes to the peer meanwhile */
	bool move_acked;      /* the owner: the peer stopped, at move_peer_tx */
	bool move_retry;      /* the owner: the peer was busy; ask again */
	bool move_refused;
	bool attaching;       /* the new owner: ATTACH not answered yet */
	/* Relays pumping it for a confined process (relay.h): the owner's
	 * application waits, neither readable nor writable, until they end, so
	 * its bytes follow theirs and it reads none twice. */
	unsigned relayed;
	bool move_fin, move_reset; /* the peer: closed while moving, said once attached */
	uint64_t move_cookie; /* the peer: what the new owner must show */
	uint64_t move_deadline;
	/* The client: sent elsewhere, waiting for a fresh rendezvous. */
	bool redirect;
	unsigned redirects;
	struct stream *redirect_next;
	uint64_t move_peer_tx;
	/* The peer's latest urgent mark (MSG_OOB, stream_urgent.c): its byte,
	 * at urg_seq. */
	uint8_t urg;      /* enum stream_urg */
	uint8_t urg_byte;
	bool urg_inline;  /* SO_OOBINLINE (sock_apply_opts) */
	uint64_t urg_seq;
	/* MSG_ZEROCOPY sends (stream_zerocopy.c): the next one's number, and
	 * the range done and not yet read from the error queue. */
	uint32_t zc_next, zc_lo, zc_hi;
	bool zc_done;
	uint32_t rcvlowat; /* SO_RCVLOWAT: readable from this many bytes (0 as 1) */
};

enum stream_urg {
	STREAM_URG_NONE,
	STREAM_URG_VALID, /* recv with MSG_OOB takes the byte; POLLPRI */
	STREAM_URG_READ,  /* taken out of band: the mark stays until read past */
};

/* How the stream layer tells the owner of a file (the fd layer) that its
 * readiness changed: mask is all it is ready for now, events what just
 * became ready (EPOLL* bits). Called under the endpoint lock. */
typedef void stream_ready_fn(struct ffile *file, uint32_t mask, uint32_t events);
/* Registers the request handlers and the session handler on rpc; ready
 * hears of every stream's and listener's readiness. */
int stream_init(struct rpc *rpc, stream_ready_fn *ready);

/* Starts a client stream on session: queues OPEN (sent at the next wait or
 * progress pass, see stream_tx_deferred) and returns at once (state
 * OPENING; the file is notified when it opens or fails). */
int stream_open(struct rpc *rpc, int session, struct ffile *file, const struct sockaddr *dst,
		socklen_t dst_len, const struct sockaddr *src, socklen_t src_len,
		struct stream **out);

/* A relay for a confined process starts (on) or ends (off) on s: the
 * application's file waits meanwhile (see relayed). Endpoint lock held. */
void stream_relay_mark(struct stream *s, bool on);
/* Bytes into iov: >0, 0 at end of stream, -EAGAIN, -ECONNRESET ... */
ssize_t stream_recv(struct rpc *rpc, struct stream *s, const struct iovec *iov, int iovcnt,
		    int flags);
/* Bytes from iov as far as the peer's window allows: >0, -EAGAIN, -EPIPE.
 * With MSG_OOB in flags, the last byte sent is urgent. */
ssize_t stream_send_flags(struct rpc *rpc, struct stream *s, const struct iovec *iov, int iovcnt,
			  int flags);
static inline ssize_t stream_send(struct rpc *rpc, struct stream *s, const struct iovec *iov,
				  int iovcnt)
{
	return stream_send_flags(rpc, s, iov, iovcnt, 0);
}
/* recv with MSG_OOB (MSG_PEEK, MSG_TRUNC): the urgent byte, 1 (0 for an
 * empty iov), or -EINVAL when there is none to take; never waits. */
ssize_t stream_recv_oob(struct stream *s, const struct iovec *iov, int iovcnt, int flags);
/* SIOCATMARK: the next byte to read is the urgent mark. */
bool stream_at_mark(const struct stream *s);
/* SO_RCVLOWAT: readiness and a blocking read's least, in bytes; held
 * within half the window, so a writer can always fill it. */
void stream_set_rcvlowat(struct stream *s, uint32_t lowat);
/* A blocking read that wants need bytes would get fewer now, and more may
 * come: it waits. */
bool stream_read_short(const struct stream *s, size_t need);
/* FIONREAD: the bytes a read may return now (short of an urgent mark). */
size_t stream_inq(const struct stream *s);
/* A send with MSG_ZEROCOPY (SO_ZEROCOPY on) went: its buffer was copied,
 * so it is done at once, and the error queue says so (EPOLLERR). */
void stream_zerocopy_sent(struct stream *s);
/* The error queue's notice (recvmsg with MSG_ERRQUEUE): false when empty,
 * else the range of sends done, dequeued. */
bool stream_zerocopy_take(struct stream *s, uint32_t *lo, uint32_t *hi);
int stream_shutdown(struct rpc *rpc, struct stream *s, int how);
/* The application let go: FIN (or RESET with unread data); s is not the
 * caller's any more. */
void stream_close(struct rpc *rpc, struct stream *s);
/* Forgets the stream without a word to the peer (fork child, exit). */
void stream_abandon(struct stream *s);
/* In a fork child: closes the child's copies of the placeholders closing
 * streams hold (the parent closes its own, phpool.h). */
void stream_fork_child(void);

/* Readiness as EPOLL* bits. */
uint32_t stream_mask(const struct stream *s);
/* Bytes the peer may still take, bytes unread here. */
size_t stream_tx_space(const struct stream *s);
/* As sk_stream_is_writeable: room of at least half what the peer has yet
 * to read (what poll reports as EPOLLOUT while the stream is open). */
bool stream_tx_writable(const struct stream *s);
/* Bytes sent and not yet consumed by the peer (SIOCOUTQ). */
size_t stream_tx_queued(const struct stream *s);
/* Takes the pending error (SO_ERROR). */
int stream_take_error(struct stream *s);
void stream_set_file(struct stream *s, struct ffile *file);

/* Frees every stream and listener without a word to any peer or file (a
 * daemon() child that starts a fresh ferry; tests). */
void stream_forget_all(void);

/* Tests only: how long a closed stream waits for the peer's FIN before
 * it is let go (as the kernel's tcp_fin_timeout, which it is otherwise). */
void stream_test_set_fin_timeout(uint64_t ns);
/* Tests only: how long bytes that came in an answer wait for a request of
 * ours to acknowledge them before a WINDOW goes on its own (1 ms). */
void stream_test_set_ack_delay(uint64_t ns);

/* Whether requests were queued since the last call (the caller then sends
 * them: rpc_flush). */
bool stream_take_tx_pending(void);
/*
 * One pass of the event loop. A DATA request's answer is held back, not
 * sent from the handler: the application's reply to those bytes, written
 * before its next wait, rides in that answer (one packet each way for a
 * request and its reply, as a bare UDP ping-pong). What the application
 * did not answer is answered plainly at its next wait
 * (stream_release_held) or at the next pass, whichever comes first, so an
 * answer waits at most until the application comes back to ferry or the
 * progress thread's tick. Answers to WINDOW/FIN/RESET are queued after
 * the pass. A stream that received bytes in an answer owes the peer word
 * of them: that rides on its next request, or goes as a WINDOW once it is
 * STREAM_ACK_DELAY_NS old. A closed stream whose peer has not ended its
 * side within the FIN timeout is let go here, without a word to the peer
 * (as the kernel's orphaned FIN_WAIT2). Returns the number of packets
 * received.
 */
unsigned stream_run_once(struct rpc *rpc);
/* Answers every held DATA request plainly (the application is about to
 * wait: its replies were written). Queued, not sent. Returns how many. */
unsigned stream_release_held(struct rpc *rpc);
/* Whether answers are held, acknowledgements owed, streams to open again
 * or a stream waits for its new owner: the progress thread keeps ticking
 * while so. Read without the lock (a hint). */
bool stream_work_pending(void);
/* Whether a held DATA answer waits for the application's reply: what a
 * wait must send first (stream_release_held). Read without the lock. */
bool stream_held_pending(void);
/* Whether an open stream has bytes the peer has not yet said it received
 * and may yet (its peer not known to be gone): exit waits for them,
 * bounded. */
bool stream_tx_undelivered(void);
/* Whether anything sent may yet be answered or delivered: requests in
 * flight to a live peer, or bytes one has not said it received. What exit
 * (and a process's own relay at its end) waits for, bounded. */
bool stream_delivery_pending(const struct rpc *rpc);

/* Whether DATA was queued and not yet flushed (any thread, no lock). */
bool stream_tx_deferred(void);
/* Called right before a pass of the event loop that will send it. */
void stream_tx_deferred_clear(void);
/* Closes with a reset instead of a FIN (SO_LINGER with a zero timeout). */
void stream_abort(struct rpc *rpc, struct stream *s);

/*
 * Streams that follow their descriptor into another process (fork, then the
 * child uses it). The owner asks the peer to stop (MOVE) and waits until
 * every byte either way is in (stream_move_ready); it then hands the
 * stream's state, unread bytes included, to the new owner
 * (stream_snapshot) and forgets it (stream_detach). The new owner dials the
 * peer and continues the stream on a session of its own (stream_restore
 * sends ATTACH with the cookie the owner gave the peer). Data never passes
 * through a third process and nothing is lost or said twice.
 *
 * A peer that sent its FIN and then closed its socket, or exited, has no
 * stream left to move (a client that sends and closes at once, a health
 * check): what remains is only read. The owner then hands over the bytes
 * and the FIN with peer_done set, and the new owner's copy reads them and
 * EOF, its writes drawing the reset a closed socket answers with
 * (stream_restore_done), as the kernel's socket reads after the peer's
 * close whoever holds it.
 */
extern uint32_t stream_forks; /* forks of this process that left children */
struct stream_snap {
	uint32_t magic;
	uint32_t peer_sid, peer_window;
	uint8_t rx_fin, rd_shut, wr_shut, fin_sent;
	uint8_t peer_done; /* the peer is gone after its FIN: read only */
	uint64_t cookie;
	uint64_t rx_head, rx_tail, rx_advertised, rx_told, fin_seq;
	uint64_t tx_seq, tx_acked, tx_delivered;
	uint64_t urg_seq;
	uint8_t urg, urg_byte;
	struct sockaddr_storage local, peer, peer_mgmt;
	socklen_t local_len, peer_len, peer_mgmt_len;
};
#define STREAM_SNAP_MAGIC 0x66727932u
/* The owner: sends MOVE; s stops sending. 0 or -errno. */
int stream_move_out(struct rpc *rpc, struct stream *s, uint64_t cookie);
/* Whether the peer stopped and every byte either way arrived. */
bool stream_move_ready(const struct stream *s);
/* fn runs (endpoint lock held, in whichever thread's pass took it) when the
 * peer answers a MOVE: the owner waiting for that answer sleeps until then
 * instead of looking again and again. NULL: nobody is told. */
void stream_set_move_heard(void (*fn)(void));
/* Whether s may still go to another process: open, or ended cleanly (after
 * the peer's FIN, or its process's death with nothing of ours unread: no
 * reset), its bytes still to read. */
bool stream_can_follow(const struct stream *s);
/* After a move that failed: whether the peer is done with s (it refused the
 * move after its FIN, or its session ended cleanly), so that s goes over
 * read only (peer_done). */
bool stream_peer_done(const struct stream *s);
/* The owner of s, handed over read only: lets a peer that lingers for our
 * side go (our FIN, if not sent yet). stream_detach follows. */
void stream_release_done(struct rpc *rpc, struct stream *s);
/* stream_snapshot of a stream handed over read only: peer_done, and the
 * FIN where the peer's end stood for one (its process died with nothing
 * of ours unread, when its kernel would have sent one). */
size_t stream_snapshot_done(const struct stream *s, struct stream_snap *snap, void *buf,
			    size_t cap);
/* Fills snap (not peer_mgmt) and returns the unread bytes' count; copies
 * them to buf (cap at least STREAM_WINDOW). */
size_t stream_snapshot(const struct stream *s, struct stream_snap *snap, void *buf, size_t cap);
/* Streams alive in this process. */
unsigned stream_count(void);
/* Forgets s without a word to the peer, which waits for the new owner;
 * drops the owner's reference (its file's, or its orphan's). */
void stream_detach(struct stream *s);
/* The new owner: a stream from snap and its unread bytes on session, with
 * ATTACH sent; writes wait for its answer. */
int stream_restore(struct rpc *rpc, int session, const struct stream_snap *snap,
		   const void *bytes, size_t len, struct ffile *file, struct stream **out);
/* The new owner of a stream handed over with peer_done: no session, the
 * bytes and EOF to read, writes refused as after the peer's reset. */
int stream_restore_done(struct rpc *rpc, const struct stream_snap *snap, const void *bytes,
			size_t len, struct ffile *file, struct stream **out);
/* The owner, once it has no file for s any more (it closed its copy while
 * a child still held one): s waits for the child (stream_close later). */
void stream_orphan(struct stream *s);
/* A stream of this process by its id, with the peer's id and the session's
 * token it had, or NULL. */
struct stream *stream_find(uint32_t sid, uint32_t peer_sid, uint64_t token);
#define STREAM_WINDOW_MAX (512u << 10)

/* Client streams a shared listener's process sent elsewhere, one at a
 * time with the list's reference (NULL when none); the caller gets a
 * fresh session to s->peer and calls stream_redirect_done. */
struct stream *stream_take_redirect(void);
bool stream_redirect_pending(void);
/* OPEN again on session (>= 0), or the connect fails (-errno). Drops the
 * reference stream_take_redirect gave. */
void stream_redirect_done(struct rpc *rpc, struct stream *s, int session);

/*
 * SO_KEEPALIVE (ka_idle_ns of silence, then a probe that may go unanswered
 * ka_wait_ns) and TCP_USER_TIMEOUT (our bytes unacknowledged that long);
 * 0 turns each off. Either ends the stream with ETIMEDOUT, as the kernel's
 * would. Only for a peer on another host: one on this host is watched by
 * its process (mgmt), whose kernel would answer probes even while stopped.
 */
void stream_set_timeouts(struct stream *s, uint64_t ka_idle_ns, uint64_t ka_wait_ns,
			 uint64_t user_timeout_ns);
/* Whether a stream's timeouts want this process looked at now and then
 * (the progress thread's idle wake-ups; any thread, no lock). */
bool stream_timed_pending(void);

/* What ferry-stat shows of a stream. The order is ferry-stat's too
 * (preload/statmap_layout.h names them). */
enum stream_stat_state {
	STREAM_STAT_OPENING,
	STREAM_STAT_OPEN,
	STREAM_STAT_HALF_CLOSED, /* one direction shut */
	STREAM_STAT_CLOSING,     /* the application closed it; the peer's side lingers */
	STREAM_STAT_RESET,
	STREAM_STAT_MOVING,      /* on its way to another process */
	STREAM_STAT_QUEUED,      /* opened, not accepted yet */
};
struct stream_stat {
	uint32_t sid;
	int session;
	enum stream_stat_state state;
	struct sockaddr_storage local, peer;
	uint64_t bytes_tx, bytes_rx;
	uint64_t unread;  /* received, not read by the application */
	uint64_t unacked; /* sent, not yet consumed by the peer */
};
/* Describes up to cap of this process's streams into out; returns how many
 * there are (more than cap: the rest were left out). */
size_t stream_stat_fill(struct stream_stat *out, size_t cap);

/* Sends FIN on every open stream (at exit, so peers see EOF at once), and
 * again, as a request, where the last went in an answer. */
void stream_fin_all(struct rpc *rpc);

#endif
