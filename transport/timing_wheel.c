/* Carousel timing wheel: a ring of FIFO slots over a preallocated entry pool. */
#include "autoconfig.h"

#include "transport/timing_wheel.h"

#include <errno.h>
#include <stdlib.h>

#define WHEEL_NIL UINT32_MAX
/* Ring indices and distances add in uint32_t; this keeps the sums exact. */
#define WHEEL_MAX_SLOTS (1u << 30)

/* Entries are linked by pool index, not pointer: half the size, and the
 * free list and the slot lists share one link field. */
struct wheel_entry {
	struct wheel_pkt pkt;
	uint32_t next;
};

struct wheel_slot {
	uint32_t head;
	uint32_t tail;
};

struct timing_wheel {
	uint64_t slot_ns;
	uint64_t cur_abs;   /* absolute slot number (time / slot_ns) of the current slot */
	uint32_t cur_idx;   /* cur_abs % n_slots, kept incrementally to avoid a division */
	uint32_t n_slots;
	uint32_t count;
	uint32_t free_head;
	/* Entries below this have been used; the rest are handed out in order,
	 * so a wheel touches its pool's pages only as it fills. */
	uint32_t fresh, capacity;
	uint32_t n_words;
	struct wheel_slot *slots;
	uint64_t *occupied; /* bit i set <=> slots[i] is not empty */
	struct wheel_entry *pool;
};

struct timing_wheel *wheel_create(uint64_t slot_ns, uint32_t n_slots, uint32_t capacity,
				  uint64_t now_ns)
{
	if (slot_ns == 0 || n_slots == 0 || n_slots > WHEEL_MAX_SLOTS || capacity == 0 ||
	    capacity >= WHEEL_NIL)
		return NULL;
	struct timing_wheel *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->slot_ns = slot_ns;
	w->n_slots = n_slots;
	w->n_words = (n_slots + 63) / 64;
	w->cur_abs = now_ns / slot_ns;
	w->cur_idx = (uint32_t)(w->cur_abs % n_slots);
	/* Neither the slots nor the pool is written here: the bitmap says
	 * which slots hold anything, and the pool is handed out in order. A
	 * process starts an endpoint per fork child (postgres, inetd), and
	 * writing both up front cost every child 80 pages. */
	w->slots = malloc((size_t)n_slots * sizeof(*w->slots));
	w->occupied = calloc(w->n_words, sizeof(*w->occupied));
	w->pool = malloc((size_t)capacity * sizeof(*w->pool));
	if (!w->slots || !w->occupied || !w->pool) {
		wheel_destroy(w);
		return NULL;
	}
	w->free_head = WHEEL_NIL;
	w->capacity = capacity;
	return w;
}

void wheel_destroy(struct timing_wheel *w)
{
	if (!w)
		return;
	free(w->pool);
	free(w->occupied);
	free(w->slots);
	free(w);
}

static uint32_t wheel_index_after(const struct timing_wheel *w, uint32_t dist)
{
	uint32_t idx = w->cur_idx + dist; /* both < n_slots <= 2^30 */
	return idx >= w->n_slots ? idx - w->n_slots : idx;
}

/* Distance from the current slot to the first occupied slot at distance
 * <= limit (limit < n_slots), or WHEEL_NIL. Scans words of the bitmap, so a
 * run of empty slots costs 1/64 of a step each. */
static uint32_t wheel_next_occupied(const struct timing_wheel *w, uint32_t limit)
{
	uint32_t start = w->cur_idx;
	uint32_t word = start / 64;
	uint64_t bits = w->occupied[word] & (~0ull << (start % 64));
	uint32_t base = word * 64; /* ring index of bit 0 of `bits` */
	/* n_words + 1 visits: the start word is seen again for its low bits. */
	for (uint32_t visits = 0; visits <= w->n_words; visits++) {
		if (bits) {
			uint32_t idx = base + (uint32_t)__builtin_ctzll(bits);
			uint32_t dist = idx >= start ? idx - start : idx + w->n_slots - start;
			return dist <= limit ? dist : WHEEL_NIL;
		}
		/* Distance of the next word's first slot; past limit ends the search. */
		uint32_t next_base = base + 64;
		if (next_base >= w->n_slots)
			next_base = 0;
		uint32_t next_dist = next_base >= start ? next_base - start
							: next_base + w->n_slots - start;
		if (next_dist > limit)
			return WHEEL_NIL;
		base = next_base;
		bits = w->occupied[base / 64];
	}
	return WHEEL_NIL;
}

static void wheel_advance(struct timing_wheel *w, uint64_t dist)
{
	w->cur_abs += dist;
	if (dist >= w->n_slots)
		dist %= w->n_slots;
	w->cur_idx = wheel_index_after(w, (uint32_t)dist);
}

int wheel_insert(struct timing_wheel *w, uint64_t tx_ns, const struct wheel_pkt *pkt)
{
	uint32_t e = w->free_head;
	if (e == WHEEL_NIL && w->fresh == w->capacity)
		return -ENOBUFS;
	uint64_t abs = tx_ns / w->slot_ns;
	uint64_t dist = abs > w->cur_abs ? abs - w->cur_abs : 0;
	if (dist >= w->n_slots)
		dist = w->n_slots - 1;
	uint32_t idx = wheel_index_after(w, (uint32_t)dist);

	if (e == WHEEL_NIL)
		e = w->fresh++;
	else
		w->free_head = w->pool[e].next;
	w->pool[e].pkt = *pkt;
	w->pool[e].next = WHEEL_NIL;
	struct wheel_slot *s = &w->slots[idx];
	if (!(w->occupied[idx / 64] & (1ull << (idx % 64)))) {
		s->head = e;
		w->occupied[idx / 64] |= 1ull << (idx % 64);
	} else {
		w->pool[s->tail].next = e;
	}
	s->tail = e;
	w->count++;
	return 0;
}

unsigned wheel_reap(struct timing_wheel *w, uint64_t now_ns, struct wheel_pkt *out, unsigned max)
{
	uint64_t now_abs = now_ns / w->slot_ns;
	if (now_abs < w->cur_abs)
		return 0;
	uint64_t due = now_abs - w->cur_abs;
	/* Every entry lies within n_slots - 1 of the current slot. */
	uint32_t limit = due >= w->n_slots ? w->n_slots - 1 : (uint32_t)due;
	unsigned n = 0;
	while (n < max) {
		uint32_t dist = w->count ? wheel_next_occupied(w, limit) : WHEEL_NIL;
		if (dist == WHEEL_NIL) {
			/* Nothing due is left: the current slot catches up with now,
			 * which is what keeps the horizon counting from now. */
			wheel_advance(w, now_abs - w->cur_abs);
			break;
		}
		wheel_advance(w, dist);
		limit -= dist;
		struct wheel_slot *s = &w->slots[w->cur_idx];
		while (n < max && s->head != WHEEL_NIL) {
			uint32_t e = s->head;
			out[n++] = w->pool[e].pkt;
			s->head = w->pool[e].next;
			w->pool[e].next = w->free_head;
			w->free_head = e;
			w->count--;
		}
		if (s->head == WHEEL_NIL) {
			s->tail = WHEEL_NIL;
			w->occupied[w->cur_idx / 64] &= ~(1ull << (w->cur_idx % 64));
		}
	}
	return n;
}

uint32_t wheel_count(const struct timing_wheel *w)
{
	return w->count;
}

uint64_t wheel_next_due_ns(const struct timing_wheel *w)
{
	if (w->count == 0)
		return UINT64_MAX;
	uint32_t dist = wheel_next_occupied(w, w->n_slots - 1);
	return (w->cur_abs + dist) * w->slot_ns;
}
