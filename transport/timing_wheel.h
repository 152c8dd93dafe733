/*
 * A Carousel timing wheel (Saeed et al., SIGCOMM 2017): packets scheduled
 * for a future transmit time, released in time order when due.
 *
 * Time is cut into slots of slot_ns; slot k covers [k*slot_ns, (k+1)*slot_ns)
 * of the monotonic clock. A slot is due once now_ns reaches its start, so a
 * packet may leave up to one slot width before its transmit time, never
 * after the reap that follows it (pacing error is bounded by slot_ns, and a
 * packet due "now" never waits a slot).
 *
 * The wheel covers n_slots slots starting at its current slot, which is the
 * slot of the last wheel_reap (or of wheel_create's now_ns). A transmit time
 * before the current slot lands in the current slot; one past the horizon
 * (slot_ns * n_slots ahead of it) lands in the last slot. The horizon thus
 * counts from the last reap: the caller reaps at least once per horizon, as
 * an event loop does, so that a far-future packet is not released early.
 *
 * Entries come from a pool of `capacity` allocated once: insert never
 * allocates and fails with -ENOBUFS when the pool is full. Insert is O(1);
 * reap costs O(slots advanced / 64 + entries returned) thanks to an
 * occupancy bitmap.
 *
 * Not thread-safe (the rpc endpoint's lock covers it).
 */
#ifndef FERRY_TIMING_WHEEL_H
#define FERRY_TIMING_WHEEL_H

#include <stddef.h>
#include <stdint.h>

/* What the rpc layer needs to find the packet again, and to tell whether it
 * is still wanted when it comes due (req_num and epoch change on completion
 * and on go-back-N rollback). The wheel copies it in and out; it never looks
 * inside. */
struct wheel_pkt {
	uint16_t session;
	uint16_t slot;
	uint32_t pkt_index; /* index in the slot's sequence of sent packets */
	uint64_t req_num;
	uint32_t epoch;
	uint32_t bytes;     /* wire bytes, for the caller's accounting */
};

struct timing_wheel;

/* slot_ns: slot width; n_slots: horizon = slot_ns * n_slots; capacity:
 * entries in the pool; now_ns: the wheel's starting time. Returns NULL when
 * an argument is zero, n_slots exceeds 2^30, capacity is UINT32_MAX, or
 * memory runs out. */
struct timing_wheel *wheel_create(uint64_t slot_ns, uint32_t n_slots, uint32_t capacity,
				  uint64_t now_ns);
/* Frees the wheel and drops any entries still in it. NULL is a no-op. */
void wheel_destroy(struct timing_wheel *w);

/* Schedules a copy of pkt for tx_ns. Returns 0, or -ENOBUFS when the pool
 * is full (nothing is changed then; reaping frees entries). */
int wheel_insert(struct timing_wheel *w, uint64_t tx_ns, const struct wheel_pkt *pkt);

/* Moves up to max entries due at now_ns into out, earliest slot first, FIFO
 * within a slot. Returns how many. Entries left over because max was
 * reached come out first next time. A now_ns earlier than the current slot
 * returns 0 and changes nothing. */
unsigned wheel_reap(struct timing_wheel *w, uint64_t now_ns, struct wheel_pkt *out, unsigned max);

/* Entries waiting. */
uint32_t wheel_count(const struct timing_wheel *w);

/* Earliest time at which an entry may come due: the start of the earliest
 * occupied slot, which may already be past (then reap now). UINT64_MAX when
 * empty. Costs O(n_slots / 64) at worst; meant for deciding how long to
 * sleep, not for every packet. */
uint64_t wheel_next_due_ns(const struct timing_wheel *w);

#endif
