/* Receive ring with out-of-order placement. */
#include "autoconfig.h"

#include "preload/rxbuf.h"
#include "transport/copy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Spare rings by size class (class k holds rings of RXBUF_MIN_RING << k):
 * the smallest class up to RXBUF_SPARES rings, kept for good; the larger
 * ones within RXBUF_SPARE_BYTES together, until a trim finds them untaken. */
#define RX_CLASSES (RXBUF_SPARE_MAX_CLASS + 1)
#define RX_CLASS_CAP (RXBUF_SPARE_BYTES / (RXBUF_MIN_RING << 1))
static struct {
	uint8_t *ring[RX_CLASS_CAP > RXBUF_SPARES ? RX_CLASS_CAP : RXBUF_SPARES];
	unsigned n;
	bool taken; /* since the last trim */
} rx_spare[RX_CLASSES];
static size_t rx_spare_bytes; /* held in the larger classes */
static uint64_t rx_trimmed_ns;

static int ring_class(uint32_t size)
{
	int k = 0;
	while ((RXBUF_MIN_RING << k) < size)
		k++;
	return (RXBUF_MIN_RING << k) == size && k < RX_CLASSES ? k : -1;
}

/* A ring of at least size bytes: the largest spare up to pref (a ring this
 * large needs no growing, and it is warm), or a new one of size. */
static uint8_t *ring_alloc(uint32_t size, uint32_t pref, uint32_t *got)
{
	if (pref > (RXBUF_MIN_RING << RXBUF_SPARE_MAX_CLASS))
		pref = RXBUF_MIN_RING << RXBUF_SPARE_MAX_CLASS;
	int lo = ring_class(size), hi = ring_class(pref);
	for (int k = hi; lo >= 0 && k >= lo; k--) {
		if (rx_spare[k].n == 0)
			continue;
		rx_spare[k].taken = true;
		if (k > 0)
			rx_spare_bytes -= RXBUF_MIN_RING << k;
		*got = RXBUF_MIN_RING << k;
		return rx_spare[k].ring[--rx_spare[k].n];
	}
	*got = size;
	return malloc(size);
}

static void ring_free(uint8_t *ring, uint32_t size)
{
	if (!ring)
		return;
	int k = ring_class(size);
	if (k == 0 && rx_spare[0].n < RXBUF_SPARES) {
		rx_spare[0].ring[rx_spare[0].n++] = ring;
	} else if (k > 0 && rx_spare_bytes + size <= RXBUF_SPARE_BYTES) {
		rx_spare[k].ring[rx_spare[k].n++] = ring;
		rx_spare_bytes += size;
	} else {
		free(ring);
	}
}

/* Frees class k's spares; returns how many. */
static unsigned class_free(int k)
{
	unsigned n = rx_spare[k].n;
	while (rx_spare[k].n > 0)
		free(rx_spare[k].ring[--rx_spare[k].n]);
	if (k > 0)
		rx_spare_bytes -= (size_t)n * (RXBUF_MIN_RING << k);
	return n;
}

unsigned rxbuf_spares_release(void)
{
	unsigned n = 0;
	for (int k = 0; k < RX_CLASSES; k++)
		n += class_free(k);
	return n;
}

size_t rxbuf_spare_bytes(void)
{
	return rx_spare_bytes;
}

unsigned rxbuf_spares_trim(uint64_t now_ns)
{
	if (now_ns - rx_trimmed_ns < RXBUF_TRIM_NS)
		return 0;
	rx_trimmed_ns = now_ns;
	unsigned n = 0;
	for (int k = 1; k < RX_CLASSES; k++) {
		if (!rx_spare[k].taken)
			n += class_free(k);
		rx_spare[k].taken = false;
	}
	return n;
}

void rxbuf_init(struct rxbuf *rb, uint32_t cap)
{
	uint32_t c = 4096;
	while (c < cap && c < (1u << 30))
		c <<= 1;
	memset(rb, 0, sizeof(*rb));
	rb->cap = c;
}

void rxbuf_free(struct rxbuf *rb)
{
	if (rb->ring)
		rb->last = rb->size;
	ring_free(rb->ring, rb->size);
	rb->ring = NULL;
	rb->size = 0;
}

static void ring_copy_in(struct rxbuf *rb, uint64_t seq, const uint8_t *src, size_t len)
{
	size_t off = (size_t)(seq & (rb->size - 1));
	size_t first = rb->size - off < len ? rb->size - off : len;
	copy_bytes(rb->ring + off, src, first);
	copy_bytes(rb->ring, src + first, len - first);
}

static void ring_copy_out(const struct rxbuf *rb, uint64_t seq, uint8_t *dst, size_t len)
{
	size_t off = (size_t)(seq & (rb->size - 1));
	size_t first = rb->size - off < len ? rb->size - off : len;
	copy_bytes(dst, rb->ring + off, first);
	copy_bytes(dst + first, rb->ring, len - first);
}

/* Makes the ring hold [head, end): a larger power of two, bytes kept at
 * their sequence numbers. */
static int ring_reserve(struct rxbuf *rb, uint64_t end)
{
	uint64_t span = end - rb->head;
	if (rb->ring && span <= rb->size)
		return 0;
	uint32_t size = rb->size ? rb->size : RXBUF_MIN_RING;
	while (size < span)
		size <<= 1;
	if (size > rb->cap)
		size = rb->cap;
	uint32_t got;
	uint8_t *ring = ring_alloc(size, rb->ring || rb->last < size ? size : rb->last, &got);
	if (!ring)
		return -ENOMEM;
	size = got;
	if (rb->ring) {
		/* Everything held lies in [head, head + old size). */
		struct rxbuf old = *rb;
		rb->ring = ring;
		rb->size = size;
		size_t off = (size_t)(old.head & (old.size - 1));
		ring_copy_in(rb, old.head, old.ring + off, old.size - off);
		ring_copy_in(rb, old.head + old.size - off, old.ring, off);
		ring_free(old.ring, old.size);
	} else {
		rb->ring = ring;
		rb->size = size;
	}
	return 0;
}

/* Drained with no hole pending: give the memory back. */
static void ring_release_if_empty(struct rxbuf *rb)
{
	if (rb->ring && rb->tail == rb->head && rb->nooo == 0)
		rxbuf_free(rb);
}

/* Records [lo, hi) past tail, merging neighbours. */
static int ooo_add(struct rxbuf *rb, uint64_t lo, uint64_t hi)
{
	unsigned i = 0;
	while (i < rb->nooo && rb->ooo[i].hi < lo)
		i++;
	unsigned j = i;
	while (j < rb->nooo && rb->ooo[j].lo <= hi) {
		if (rb->ooo[j].lo < lo)
			lo = rb->ooo[j].lo;
		if (rb->ooo[j].hi > hi)
			hi = rb->ooo[j].hi;
		j++;
	}
	if (i == j) {
		if (rb->nooo == RXBUF_HOLES_MAX)
			return -ENOSPC;
		memmove(&rb->ooo[i + 1], &rb->ooo[i], (rb->nooo - i) * sizeof(rb->ooo[0]));
		rb->nooo++;
	} else if (j - i > 1) {
		memmove(&rb->ooo[i + 1], &rb->ooo[j], (rb->nooo - j) * sizeof(rb->ooo[0]));
		rb->nooo -= j - i - 1;
	}
	rb->ooo[i].lo = lo;
	rb->ooo[i].hi = hi;
	return 0;
}

int rxbuf_put(struct rxbuf *rb, uint64_t seq, const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t end = seq + len;
	if (end > rb->head + rb->cap)
		return -EMSGSIZE;
	if (end <= rb->tail || len == 0)
		return 0; /* a duplicate */
	if (seq < rb->tail) {
		p += rb->tail - seq;
		seq = rb->tail;
	}
	int rc = ring_reserve(rb, end);
	if (rc)
		return rc;
	if (seq > rb->tail) {
		rc = ooo_add(rb, seq, end);
		if (rc)
			return rc;
		ring_copy_in(rb, seq, p, (size_t)(end - seq));
		return 0;
	}
	ring_copy_in(rb, seq, p, (size_t)(end - seq));
	rb->tail = end;
	/* Close the holes this filled. */
	unsigned k = 0;
	while (k < rb->nooo && rb->ooo[k].lo <= rb->tail) {
		if (rb->ooo[k].hi > rb->tail)
			rb->tail = rb->ooo[k].hi;
		k++;
	}
	if (k) {
		memmove(&rb->ooo[0], &rb->ooo[k], (rb->nooo - k) * sizeof(rb->ooo[0]));
		rb->nooo -= k;
	}
	return 0;
}

size_t rxbuf_read_at(struct rxbuf *rb, size_t skip, size_t max, const struct iovec *iov,
		     int iovcnt, bool peek)
{
	size_t avail = rxbuf_avail(rb);
	if (skip > avail)
		skip = avail;
	avail -= skip;
	if (avail > max)
		avail = max;
	size_t done = 0;
	uint64_t seq = rb->head + skip;
	for (int i = 0; i < iovcnt && done < avail; i++) {
		size_t n = iov[i].iov_len;
		if (n > avail - done)
			n = avail - done;
		if (n == 0)
			continue;
		ring_copy_out(rb, seq + done, iov[i].iov_base, n);
		done += n;
	}
	if (!peek) {
		rb->head += skip + done;
		ring_release_if_empty(rb);
	}
	return done;
}

int rxbuf_byte_at(const struct rxbuf *rb, uint64_t seq)
{
	bool held = seq >= rb->head && seq < rb->tail;
	for (unsigned i = 0; i < rb->nooo && !held; i++)
		held = seq >= rb->ooo[i].lo && seq < rb->ooo[i].hi;
	if (!held)
		return -1;
	uint8_t b;
	ring_copy_out(rb, seq, &b, 1);
	return b;
}

size_t rxbuf_skip(struct rxbuf *rb, size_t n)
{
	size_t avail = rxbuf_avail(rb);
	if (n > avail)
		n = avail;
	rb->head += n;
	ring_release_if_empty(rb);
	return n;
}
