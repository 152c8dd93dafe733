/*
 * A Carousel timing wheel: packets scheduled for a future transmit time,
 * released in time order when due. Fixed slot width, fixed horizon; a
 * transmit time past the horizon lands in the last slot, one in the past in
 * the current slot. Entries come from a fixed pool: insert fails when full.
 * Not thread-safe (the rpc endpoint's lock covers it).
 */
#ifndef FERRY_TIMING_WHEEL_H
#define FERRY_TIMING_WHEEL_H

#include <stddef.h>
#include <stdint.h>

/* What the rpc layer needs to find the packet again, and to tell whether it
 * is still wanted when it comes due (req_num and epoch change on completion
 * and on go-back-N rollback). */
struct wheel_pkt {
	uint16_t session;
	uint16_t slot;
	uint32_t pkt_index; /* index in the slot's sequence of sent packets */
	uint64_t req_num;
	uint32_t epoch;
	uint32_t bytes;     /* wire bytes, for the caller's accounting */
};

struct timing_wheel;

/* slot_ns: slot width; n_slots: horizon = slot_ns * n_slots; capacity: entries. */
struct timing_wheel *wheel_create(uint64_t slot_ns, uint32_t n_slots, uint32_t capacity,
				  uint64_t now_ns);
void wheel_destroy(struct timing_wheel *w);

/* Schedules pkt for tx_ns. Returns 0, or -ENOBUFS when the pool is full. */
int wheel_insert(struct timing_wheel *w, uint64_t tx_ns, const struct wheel_pkt *pkt);

/* Moves up to max entries due at now_ns into out, earliest slot first, FIFO
 * within a slot. Returns how many. */
unsigned wheel_reap(struct timing_wheel *w, uint64_t now_ns, struct wheel_pkt *out, unsigned max);

/* Entries waiting. */
uint32_t wheel_count(const struct timing_wheel *w);

/* Earliest time at which an entry may come due (UINT64_MAX when empty). */
uint64_t wheel_next_due_ns(const struct timing_wheel *w);

#endif
