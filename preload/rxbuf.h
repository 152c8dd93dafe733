/*
 * A stream's receive side: a ring as large as the receive window, bytes
 * placed by sequence number so DATA requests may arrive in any order, and
 * the rule for when the reader tells the writer its window moved. Pure data
 * structure: no locks, no transport. The spare rings (below) are shared by
 * every rxbuf, so the caller serialises all calls (ferry's endpoint lock).
 */
#ifndef FERRY_PRELOAD_RXBUF_H
#define FERRY_PRELOAD_RXBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Holes the ring tracks at once; a writer has at most a session's slots of
 * requests in flight, so more than this means a broken peer. */
#define RXBUF_HOLES_MAX 64

/* Smallest ring allocated; rings grow up to the window and are given up
 * when drained, so an idle stream holds no buffer (as a kernel socket). */
#define RXBUF_MIN_RING 4096u
/* Drained rings of the smallest size are kept, this many at most for the
 * whole process, for the next stream that receives: a reader that drains
 * everything each time (redis, memcached) would otherwise malloc and free
 * a ring per message. */
#define RXBUF_SPARES 16
/* Larger drained rings, up to RXBUF_MIN_RING << RXBUF_SPARE_MAX_CLASS, are
 * kept too, within this many bytes together, until a trim finds them not
 * taken since the one before: a bulk reader drains its ring on every read,
 * and a ring freed and allocated again costs its pages' faults each time
 * (glibc returns freed top-of-heap memory to the kernel). */
#define RXBUF_SPARE_MAX_CLASS 8
#define RXBUF_SPARE_BYTES (1u << 20)
/* How often at most a trim gives back untaken spares. */
#define RXBUF_TRIM_NS 1000000000ull

/*
 * In-order bytes of a large packet may stay where the transport received
 * them, the packet's buffer held until the reader has them (rxbuf_keep):
 * one copy, into the reader's buffer, instead of two. Up to this many
 * packets a stream; past that, or out of order, bytes go into the ring.
 */
#define RXBUF_KEPT_MAX 64u

struct rxbuf_kept {
	const uint8_t *data;
	uint64_t seq;
	uint32_t len;
	void *buf; /* the transport's handle for the packet's buffer */
};

/* A stream's kept packets, in sequence order, while it has any. */
struct rxbuf_keep {
	void *owner; /* whom the buffers go back to (rxbuf_release_fn) */
	unsigned first, n;
	struct rxbuf_kept seg[RXBUF_KEPT_MAX];
};

struct rxbuf {
	struct rxbuf_keep *keep; /* NULL while no packet is kept */
	uint8_t *ring;   /* size bytes, or NULL while nothing is held */
	uint32_t size;   /* a power of two, <= cap */
	uint32_t cap;    /* the window: a power of two */
	uint32_t last;   /* the size the ring had when last given up */
	uint64_t head;   /* next byte the application reads */
	uint64_t tail;   /* end of the bytes received in order */
	unsigned nooo;   /* ranges received past tail, sorted, disjoint */
	struct {
		uint64_t lo, hi;
	} ooo[RXBUF_HOLES_MAX];
};

/* cap is rounded up to a power of two. Allocates nothing yet. */
void rxbuf_init(struct rxbuf *rb, uint32_t cap);
/* Frees the ring and gives kept packets' buffers back. */
void rxbuf_free(struct rxbuf *rb);
/* As rxbuf_free, but kept buffers are forgotten, not given back: their
 * owner is gone (a fork child, a closed endpoint). */
void rxbuf_abandon(struct rxbuf *rb);

/* How kept buffers are given back, once read: set once by the stream
 * layer. Without it nothing is kept. */
typedef void rxbuf_release_fn(void *owner, void *buf);
void rxbuf_set_release(rxbuf_release_fn *fn);

/*
 * Whether len bytes at seq may be kept rather than copied: they are next
 * in order with no hole past them, fit the window, and the stream keeps
 * fewer than RXBUF_KEPT_MAX packets, all from owner. Allocates the record
 * of kept packets if needed; false if that fails.
 */
bool rxbuf_keep_ready(struct rxbuf *rb, uint64_t seq, size_t len, void *owner);
/* Appends len bytes at data, in buf, after a true rxbuf_keep_ready. */
void rxbuf_keep(struct rxbuf *rb, const void *data, size_t len, void *buf);
/* Packets kept now. */
static inline unsigned rxbuf_kept(const struct rxbuf *rb)
{
	return rb->keep ? rb->keep->n : 0;
}
/* Frees the spare rings (teardown, tests). Returns how many there were. */
unsigned rxbuf_spares_release(void);
/* Bytes held in spare rings past the smallest size: while there are any, a
 * trim is due now and then. */
size_t rxbuf_spare_bytes(void);
/* Frees the larger spares none of which was taken since the previous trim,
 * at most once per RXBUF_TRIM_NS. Returns how many were freed. */
unsigned rxbuf_spares_trim(uint64_t now_ns);

/*
 * Stores len bytes that start at sequence number seq (copied into the ring). Bytes
 * already held are ignored. Returns 0, -EMSGSIZE when the bytes reach past
 * head + cap (the writer ignored the window), -ENOSPC when too many holes,
 * -ENOMEM.
 */
int rxbuf_put(struct rxbuf *rb, uint64_t seq, const void *data, size_t len);

static inline size_t rxbuf_avail(const struct rxbuf *rb)
{
	return (size_t)(rb->tail - rb->head);
}

/* Copies up to the iovec's total, and at most max bytes, from skip bytes
 * past head into it; consumes the skipped and copied bytes unless peek.
 * Returns the bytes copied. */
size_t rxbuf_read_at(struct rxbuf *rb, size_t skip, size_t max, const struct iovec *iov,
		     int iovcnt, bool peek);

/* Copies up to the iovec's total into it; consumes unless peek. Returns the
 * bytes copied. */
static inline size_t rxbuf_read(struct rxbuf *rb, const struct iovec *iov, int iovcnt, bool peek)
{
	return rxbuf_read_at(rb, 0, SIZE_MAX, iov, iovcnt, peek);
}

/* The byte received at seq (in order or past a hole), or -1 when it is not
 * held. */
int rxbuf_byte_at(const struct rxbuf *rb, uint64_t seq);

/* Consumes up to n bytes without copying them. */
size_t rxbuf_skip(struct rxbuf *rb, size_t n);

/*
 * Whether the reader should tell the writer about bytes consumed since it
 * last did (advertised): after a quarter of the window, so a writer that
 * filled the window always hears before the reader runs dry, and a reader
 * does not send one update per small read.
 */
static inline bool rxbuf_update_due(const struct rxbuf *rb, uint64_t advertised)
{
	return rb->head - advertised >= rb->cap / 4;
}

#endif
