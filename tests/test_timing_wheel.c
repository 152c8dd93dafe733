/* Timing wheel: time order, FIFO per slot, clamping, pool limits, wraparound. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "transport/timing_wheel.h"

#define SLOT 1000ull /* ns */
#define T0 1000000ull

static struct wheel_pkt pkt(uint64_t id)
{
	return (struct wheel_pkt){.session = (uint16_t)(id >> 16), .slot = (uint16_t)id,
				  .req_num = id, .bytes = 100};
}

static void insert_ok(struct timing_wheel *w, uint64_t tx, uint64_t id)
{
	struct wheel_pkt p = pkt(id);
	cr_assert_eq(wheel_insert(w, tx, &p), 0, "insert id %llu at %llu", (unsigned long long)id,
		     (unsigned long long)tx);
}

Test(wheel, create_rejects_zero_arguments)
{
	cr_assert_null(wheel_create(0, 8, 8, 0));
	cr_assert_null(wheel_create(SLOT, 0, 8, 0));
	cr_assert_null(wheel_create(SLOT, 8, 0, 0));
	cr_assert_null(wheel_create(SLOT, 8, UINT32_MAX, 0));
	cr_assert_null(wheel_create(SLOT, (1u << 30) + 1, 8, 0));
	wheel_destroy(NULL);
}

Test(wheel, empty_wheel_reaps_nothing)
{
	struct timing_wheel *w = wheel_create(SLOT, 16, 8, T0);
	cr_assert_not_null(w);
	struct wheel_pkt out[4];
	cr_assert_eq(wheel_count(w), 0);
	cr_assert_eq(wheel_next_due_ns(w), UINT64_MAX);
	cr_assert_eq(wheel_reap(w, T0 + 100 * SLOT, out, 4), 0);
	wheel_destroy(w);
}

Test(wheel, releases_in_time_order_across_slots_and_not_before_due)
{
	struct timing_wheel *w = wheel_create(SLOT, 64, 16, T0);
	insert_ok(w, T0 + 5 * SLOT, 5);
	insert_ok(w, T0 + 1 * SLOT, 1);
	insert_ok(w, T0 + 3 * SLOT + 10, 3);
	insert_ok(w, T0 + 2 * SLOT + SLOT - 1, 2);
	cr_assert_eq(wheel_count(w), 4);

	struct wheel_pkt out[8];
	cr_assert_eq(wheel_reap(w, T0 + SLOT - 1, out, 8), 0, "nothing due before slot 1");
	cr_assert_eq(wheel_reap(w, T0 + 2 * SLOT - 1, out, 8), 1);
	cr_assert_eq(out[0].req_num, 1);
	cr_assert_eq(wheel_reap(w, T0 + 2 * SLOT - 1, out, 8), 0, "slot 2 is not due yet");
	cr_assert_eq(wheel_reap(w, T0 + 10 * SLOT, out, 8), 3);
	cr_assert_eq(out[0].req_num, 2);
	cr_assert_eq(out[1].req_num, 3);
	cr_assert_eq(out[2].req_num, 5);
	cr_assert_eq(out[2].bytes, 100, "the packet is copied whole");
	cr_assert_eq(wheel_count(w), 0);
	wheel_destroy(w);
}

Test(wheel, fifo_within_a_slot_even_when_reaped_piecemeal)
{
	struct timing_wheel *w = wheel_create(SLOT, 32, 64, T0);
	for (uint64_t i = 0; i < 10; i++)
		insert_ok(w, T0 + 4 * SLOT + (i * 37) % SLOT, i);
	insert_ok(w, T0 + 5 * SLOT, 100);
	struct wheel_pkt out[3];
	uint64_t next = 0;
	unsigned n;
	while ((n = wheel_reap(w, T0 + 6 * SLOT, out, 3)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			uint64_t want = next < 10 ? next : 100;
			cr_assert_eq(out[i].req_num, want, "got %llu want %llu",
				     (unsigned long long)out[i].req_num, (unsigned long long)want);
			next++;
		}
	}
	cr_assert_eq(next, 11);
	wheel_destroy(w);
}

Test(wheel, past_goes_to_current_slot_and_is_due_at_once)
{
	struct timing_wheel *w = wheel_create(SLOT, 16, 8, T0 + 10 * SLOT);
	insert_ok(w, T0 + 11 * SLOT, 2);
	insert_ok(w, 0, 1); /* long past */
	cr_assert_eq(wheel_next_due_ns(w), T0 + 10 * SLOT);
	struct wheel_pkt out[4];
	cr_assert_eq(wheel_reap(w, T0 + 10 * SLOT, out, 4), 1);
	cr_assert_eq(out[0].req_num, 1);
	cr_assert_eq(wheel_count(w), 1);
	wheel_destroy(w);
}

Test(wheel, beyond_horizon_goes_to_last_slot_behind_earlier_entries)
{
	const uint32_t n_slots = 8;
	struct timing_wheel *w = wheel_create(SLOT, n_slots, 8, T0);
	insert_ok(w, T0 + 1000 * SLOT, 9);          /* far future: clamped to slot 7 */
	insert_ok(w, T0 + (n_slots - 1) * SLOT, 7); /* exactly the last slot */
	insert_ok(w, T0 + (n_slots - 2) * SLOT, 6);
	cr_assert_eq(wheel_next_due_ns(w), T0 + (n_slots - 2) * SLOT);

	struct wheel_pkt out[4];
	cr_assert_eq(wheel_reap(w, T0 + (n_slots - 2) * SLOT, out, 4), 1);
	cr_assert_eq(out[0].req_num, 6);
	cr_assert_eq(wheel_next_due_ns(w), T0 + (n_slots - 1) * SLOT);
	cr_assert_eq(wheel_reap(w, T0 + (n_slots - 1) * SLOT, out, 4), 2);
	cr_assert_eq(out[0].req_num, 9, "clamped entry went in first, so FIFO puts it first");
	cr_assert_eq(out[1].req_num, 7);
	wheel_destroy(w);
}

Test(wheel, time_going_backwards_changes_nothing)
{
	struct timing_wheel *w = wheel_create(SLOT, 16, 8, T0);
	insert_ok(w, T0 + 2 * SLOT, 1);
	struct wheel_pkt out[2];
	cr_assert_eq(wheel_reap(w, T0 + SLOT, out, 2), 0);
	cr_assert_eq(wheel_reap(w, T0 - 5 * SLOT, out, 2), 0);
	cr_assert_eq(wheel_next_due_ns(w), T0 + 2 * SLOT);
	cr_assert_eq(wheel_reap(w, T0 + 2 * SLOT, out, 0), 0, "max 0 takes nothing");
	cr_assert_eq(wheel_reap(w, T0 + 2 * SLOT, out, 2), 1);
	wheel_destroy(w);
}

Test(wheel, full_pool_refuses_then_recovers_after_reap)
{
	struct timing_wheel *w = wheel_create(SLOT, 16, 4, T0);
	for (uint64_t i = 0; i < 4; i++)
		insert_ok(w, T0 + (i % 2) * SLOT, i);
	struct wheel_pkt p = pkt(99);
	cr_assert_eq(wheel_insert(w, T0, &p), -ENOBUFS);
	cr_assert_eq(wheel_count(w), 4, "a refused insert changes nothing");

	struct wheel_pkt out[4];
	cr_assert_eq(wheel_reap(w, T0, out, 4), 2);
	insert_ok(w, T0 + 3 * SLOT, 4);
	insert_ok(w, T0 + 3 * SLOT, 5);
	cr_assert_eq(wheel_insert(w, T0, &p), -ENOBUFS);
	cr_assert_eq(wheel_reap(w, T0 + 3 * SLOT, out, 4), 4);
	uint64_t want[] = {1, 3, 4, 5};
	for (int i = 0; i < 4; i++)
		cr_assert_eq(out[i].req_num, want[i]);
	cr_assert_eq(wheel_count(w), 0);
	wheel_destroy(w);
}

/* A ring whose size is not a multiple of 64 exercises the bitmap's ragged
 * last word; the wheel runs through many horizons, one step per slot and
 * in big jumps. */
Test(wheel, wraps_around_over_many_horizons)
{
	const uint32_t n_slots = 100;
	struct timing_wheel *w = wheel_create(SLOT, n_slots, 8, T0);
	struct wheel_pkt out[8];
	uint64_t now = T0, id = 0;
	for (int round = 0; round < 2000; round++) {
		uint64_t ahead = (uint64_t)(round * 7919 % n_slots);
		uint64_t tx = now + ahead * SLOT;
		/* The horizon counts from the last reap; an event loop reaps. */
		cr_assert_eq(wheel_reap(w, now, out, 8), 0);
		uint64_t due = tx / SLOT * SLOT;
		insert_ok(w, tx, ++id);
		cr_assert_eq(wheel_next_due_ns(w), due);
		if (ahead > 0)
			cr_assert_eq(wheel_reap(w, due - 1, out, 8), 0, "round %d early", round);
		cr_assert_eq(wheel_reap(w, due, out, 8), 1, "round %d", round);
		cr_assert_eq(out[0].req_num, id);
		/* Sometimes leap several horizons while empty. */
		now = tx + (round % 5 == 0 ? 3 * n_slots * SLOT + 17 : 0);
	}
	wheel_destroy(w);
}

Test(wheel, next_due_tracks_earliest_occupied_slot)
{
	struct timing_wheel *w = wheel_create(SLOT, 300, 8, T0);
	insert_ok(w, T0 + 250 * SLOT + 5, 1);
	cr_assert_eq(wheel_next_due_ns(w), T0 + 250 * SLOT, "rounded down to the slot start");
	insert_ok(w, T0 + 70 * SLOT, 2);
	cr_assert_eq(wheel_next_due_ns(w), T0 + 70 * SLOT);
	struct wheel_pkt out[2];
	cr_assert_eq(wheel_reap(w, T0 + 100 * SLOT, out, 2), 1);
	cr_assert_eq(wheel_next_due_ns(w), T0 + 250 * SLOT);
	/* A wheel lagging behind reports a due time in the past: reap now. */
	insert_ok(w, T0 + 10 * SLOT, 3);
	cr_assert_eq(wheel_next_due_ns(w), T0 + 100 * SLOT);
	wheel_destroy(w);
}

/* Reference model: stable-sorted by (clamped slot, insertion order). */
struct ref {
	uint64_t slot;
	uint64_t seq;
};

static int ref_cmp(const void *a, const void *b)
{
	const struct ref *x = a, *y = b;
	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

Test(wheel, randomized_against_sorted_reference)
{
	enum { N_SLOTS = 130, CAP = 512, STEPS = 4000 };
	struct timing_wheel *w = wheel_create(SLOT, N_SLOTS, CAP, T0);
	static struct ref ref[CAP];
	size_t n_ref = 0;
	uint64_t now = T0, seq = 0, cur_slot = T0 / SLOT;
	unsigned seed = 12345;
	struct wheel_pkt out[CAP];

	for (int step = 0; step < STEPS; step++) {
		unsigned r = (unsigned)rand_r(&seed);
		if (r % 3 != 0) {
			/* Insert: sometimes past, sometimes beyond the horizon. */
			int64_t off = (int64_t)(rand_r(&seed) % (2 * N_SLOTS * SLOT)) - 20 * (int64_t)SLOT;
			uint64_t tx = (int64_t)now + off < 0 ? 0 : (uint64_t)((int64_t)now + off);
			struct wheel_pkt p = pkt(seq);
			int rc = wheel_insert(w, tx, &p);
			if (n_ref == CAP) {
				cr_assert_eq(rc, -ENOBUFS);
				continue;
			}
			cr_assert_eq(rc, 0);
			uint64_t s = tx / SLOT;
			if (s < cur_slot)
				s = cur_slot;
			if (s > cur_slot + N_SLOTS - 1)
				s = cur_slot + N_SLOTS - 1;
			ref[n_ref++] = (struct ref){.slot = s, .seq = seq++};
		} else {
			now += (uint64_t)(rand_r(&seed) % (3 * SLOT * (r % 7 == 0 ? N_SLOTS : 4)));
			unsigned max = 1 + (unsigned)rand_r(&seed) % 40;
			qsort(ref, n_ref, sizeof(ref[0]), ref_cmp);
			size_t due = 0;
			while (due < n_ref && ref[due].slot <= now / SLOT)
				due++;
			unsigned want = due < max ? (unsigned)due : max;
			unsigned got = wheel_reap(w, now, out, max);
			cr_assert_eq(got, want, "step %d: got %u want %u", step, got, want);
			for (unsigned i = 0; i < got; i++)
				cr_assert_eq(out[i].req_num, ref[i].seq, "step %d entry %u", step, i);
			/* The current slot catches up with now unless max stopped
			 * the reap; then it stays where the reap stopped. */
			cur_slot = got == max ? ref[got - 1].slot : now / SLOT;
			n_ref -= got;
			memmove(ref, ref + got, n_ref * sizeof(ref[0]));
		}
		cr_assert_eq(wheel_count(w), n_ref);
		if (n_ref) {
			uint64_t min = ref[0].slot;
			for (size_t i = 1; i < n_ref; i++)
				if (ref[i].slot < min)
					min = ref[i].slot;
			cr_assert_eq(wheel_next_due_ns(w), min * SLOT, "step %d", step);
		} else {
			cr_assert_eq(wheel_next_due_ns(w), UINT64_MAX);
		}
	}
	wheel_destroy(w);
}
