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

/* Records of kept packets, kept for the next stream as the smallest rings
 * are: a reader of large messages drains its record on every read. */
static struct rxbuf_keep *keep_spare[RXBUF_SPARES];
static unsigned keep_nspare;
static rxbuf_release_fn *keep_release;

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
	while (keep_nspare)
		free(keep_spare[--keep_nspare]);
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

void rxbuf_set_release(rxbuf_release_fn *fn)
{
	keep_release = fn;
}

static struct rxbuf_kept *kept_at(const struct rxbuf_keep *k, unsigned i)
{
	return (struct rxbuf_kept *)&k->seg[(k->first + i) & (RXBUF_KEPT_MAX - 1)];
}

static void keep_put(struct rxbuf *rb)
{
	if (keep_nspare < RXBUF_SPARES)
		keep_spare[keep_nspare++] = rb->keep;
	else
		free(rb->keep);
	rb->keep = NULL;
}

/* Gives back the kept packets the reader is past (all, if give_all). */
static void keep_release_read(struct rxbuf *rb, bool give_all)
{
	struct rxbuf_keep *k = rb->keep;
	while (k->n) {
		struct rxbuf_kept *g = kept_at(k, 0);
		if (!give_all && g->seq + g->len > rb->head)
			break;
		keep_release(k->owner, g->buf);
		k->first = (k->first + 1) & (RXBUF_KEPT_MAX - 1);
		k->n--;
	}
	if (!k->n)
		keep_put(rb);
}

static void ring_drop(struct rxbuf *rb)
{
	if (rb->ring)
		rb->last = rb->size;
	ring_free(rb->ring, rb->size);
	rb->ring = NULL;
	rb->size = 0;
}

void rxbuf_free(struct rxbuf *rb)
{
	if (rb->keep)
		keep_release_read(rb, true);
	ring_drop(rb);
}

void rxbuf_abandon(struct rxbuf *rb)
{
	free(rb->keep);
	rb->keep = NULL;
	ring_drop(rb);
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

/* Bytes read: kept packets read through go back; drained with no hole
 * pending, the ring goes too. */
static void release_read(struct rxbuf *rb)
{
	if (rb->keep)
		keep_release_read(rb, false);
	if (rb->ring && rb->tail == rb->head && rb->nooo == 0)
		ring_drop(rb);
}

/* Copies [seq, seq + len), all of it held, from the kept packets that
 * have it and the ring for the rest. */
static void copy_out(const struct rxbuf *rb, uint64_t seq, uint8_t *dst, size_t len)
{
	const struct rxbuf_keep *k = rb->keep;
	unsigned i = 0;
	while (len) {
		size_t n = len;
		while (k && i < k->n && kept_at(k, i)->seq + kept_at(k, i)->len <= seq)
			i++;
		const struct rxbuf_kept *g = k && i < k->n ? kept_at(k, i) : NULL;
		if (g && g->seq <= seq) {
			if (n > g->seq + g->len - seq)
				n = (size_t)(g->seq + g->len - seq);
			copy_bytes(dst, g->data + (seq - g->seq), n);
		} else {
			if (g && n > g->seq - seq)
				n = (size_t)(g->seq - seq);
			ring_copy_out(rb, seq, dst, n);
		}
		seq += n;
		dst += n;
		len -= n;
	}
}

bool rxbuf_keep_ready(struct rxbuf *rb, uint64_t seq, size_t len, void *owner)
{
	if (!keep_release || seq != rb->tail || rb->nooo || len == 0 ||
	    seq + len > rb->head + rb->cap)
		return false;
	if (rb->keep)
		return rb->keep->owner == owner && rb->keep->n < RXBUF_KEPT_MAX;
	rb->keep = keep_nspare ? keep_spare[--keep_nspare] : malloc(sizeof(*rb->keep));
	if (!rb->keep)
		return false;
	rb->keep->owner = owner;
	rb->keep->first = rb->keep->n = 0;
	return true;
}

void rxbuf_keep(struct rxbuf *rb, const void *data, size_t len, void *buf)
{
	struct rxbuf_keep *k = rb->keep;
	*kept_at(k, k->n++) = (struct rxbuf_kept){
		.data = data, .seq = rb->tail, .len = (uint32_t)len, .buf = buf};
	rb->tail += len;
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
		copy_out(rb, seq + done, iov[i].iov_base, n);
		done += n;
	}
	if (!peek) {
		rb->head += skip + done;
		release_read(rb);
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
	copy_out(rb, seq, &b, 1);
	return b;
}

size_t rxbuf_skip(struct rxbuf *rb, size_t n)
{
	size_t avail = rxbuf_avail(rb);
	if (n > avail)
		n = avail;
	rb->head += n;
	release_read(rb);
	return n;
}
