/* Stream receive side: in-order and out-of-order placement, the window
 * bound, peeking, wrap-around, and when a window update is due. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "preload/rxbuf.h"

static struct rxbuf rb;

static void setup(void)
{
	rxbuf_init(&rb, 4096);
}

static void teardown(void)
{
	rxbuf_free(&rb);
	rxbuf_spares_release();
}

static size_t read_all(uint8_t *out, size_t cap, bool peek)
{
	struct iovec v = {out, cap};
	return rxbuf_read(&rb, &v, 1, peek);
}

TestSuite(rxbuf, .init = setup, .fini = teardown, .timeout = 10);

Test(rxbuf, capacity_is_a_power_of_two_at_least_asked)
{
	struct rxbuf r;
	rxbuf_init(&r, 5000);
	cr_assert_eq(r.cap, 8192);
	rxbuf_free(&r);
}

Test(rxbuf, in_order_bytes_come_out_in_order)
{
	cr_assert_eq(rxbuf_put(&rb, 0, "hello ", 6), 0);
	cr_assert_eq(rxbuf_put(&rb, 6, "world", 5), 0);
	cr_assert_eq(rxbuf_avail(&rb), 11);
	uint8_t out[32];
	cr_assert_eq(read_all(out, sizeof(out), false), 11);
	cr_assert_arr_eq(out, "hello world", 11);
	cr_assert_eq(rxbuf_avail(&rb), 0);
}

Test(rxbuf, out_of_order_waits_for_the_hole)
{
	cr_assert_eq(rxbuf_put(&rb, 5, "56789", 5), 0);
	cr_assert_eq(rxbuf_avail(&rb), 0, "nothing readable before the hole fills");
	cr_assert_eq(rxbuf_put(&rb, 12, "CD", 2), 0);
	cr_assert_eq(rxbuf_put(&rb, 0, "01234", 5), 0);
	cr_assert_eq(rxbuf_avail(&rb), 10);
	cr_assert_eq(rxbuf_put(&rb, 10, "AB", 2), 0);
	cr_assert_eq(rxbuf_avail(&rb), 14);
	uint8_t out[32];
	cr_assert_eq(read_all(out, sizeof(out), false), 14);
	cr_assert_arr_eq(out, "0123456789ABCD", 14);
}

Test(rxbuf, duplicates_and_overlaps_are_harmless)
{
	cr_assert_eq(rxbuf_put(&rb, 0, "abcd", 4), 0);
	cr_assert_eq(rxbuf_put(&rb, 0, "abcd", 4), 0);
	cr_assert_eq(rxbuf_put(&rb, 2, "cdef", 4), 0);
	cr_assert_eq(rxbuf_avail(&rb), 6);
	uint8_t out[8];
	cr_assert_eq(read_all(out, sizeof(out), false), 6);
	cr_assert_arr_eq(out, "abcdef", 6);
	/* Already consumed: ignored, not re-delivered. */
	cr_assert_eq(rxbuf_put(&rb, 0, "abcdef", 6), 0);
	cr_assert_eq(rxbuf_avail(&rb), 0);
}

Test(rxbuf, a_writer_past_the_window_is_refused)
{
	static uint8_t big[4096];
	cr_assert_eq(rxbuf_put(&rb, 0, big, 4096), 0, "exactly the window fits");
	cr_assert_eq(rxbuf_put(&rb, 4096, "x", 1), -EMSGSIZE);
	uint8_t out[100];
	cr_assert_eq(read_all(out, 100, false), 100);
	cr_assert_eq(rxbuf_put(&rb, 4096, big, 100), 0, "reading opened the window");
	cr_assert_eq(rxbuf_put(&rb, 4196, "x", 1), -EMSGSIZE);
}

Test(rxbuf, peek_leaves_the_bytes)
{
	rxbuf_put(&rb, 0, "peekaboo", 8);
	uint8_t out[8];
	cr_assert_eq(read_all(out, 4, true), 4);
	cr_assert_arr_eq(out, "peek", 4);
	cr_assert_eq(rxbuf_avail(&rb), 8);
	cr_assert_eq(read_all(out, 8, false), 8);
	cr_assert_arr_eq(out, "peekaboo", 8);
}

Test(rxbuf, scatter_read_fills_every_iovec)
{
	rxbuf_put(&rb, 0, "abcdefghij", 10);
	char a[3], b[4], c[10];
	struct iovec v[3] = {{a, 3}, {b, 4}, {c, 10}};
	cr_assert_eq(rxbuf_read(&rb, v, 3, false), 10);
	cr_assert_arr_eq(a, "abc", 3);
	cr_assert_arr_eq(b, "defg", 4);
	cr_assert_arr_eq(c, "hij", 3);
}

Test(rxbuf, bytes_survive_wrap_around)
{
	uint8_t chunk[1500], out[1500];
	uint64_t seq = 0;
	for (int round = 0; round < 20; round++) {
		for (size_t i = 0; i < sizeof(chunk); i++)
			chunk[i] = (uint8_t)(round * 7 + i);
		/* Deliver the second half first to exercise holes across the wrap. */
		cr_assert_eq(rxbuf_put(&rb, seq + 700, chunk + 700, 800), 0);
		cr_assert_eq(rxbuf_put(&rb, seq, chunk, 700), 0);
		cr_assert_eq(read_all(out, sizeof(out), false), sizeof(out));
		cr_assert_arr_eq(out, chunk, sizeof(chunk));
		seq += sizeof(chunk);
	}
}

Test(rxbuf, too_many_holes_is_an_error_not_corruption)
{
	int rc = 0;
	for (unsigned i = 0; i <= RXBUF_HOLES_MAX && rc == 0; i++)
		rc = rxbuf_put(&rb, 2 + 2 * i, "x", 1);
	cr_assert_eq(rc, -ENOSPC);
	cr_assert_eq(rxbuf_avail(&rb), 0);
}

Test(rxbuf, skip_consumes_without_copying)
{
	rxbuf_put(&rb, 0, "0123456789", 10);
	cr_assert_eq(rxbuf_skip(&rb, 4), 4);
	uint8_t out[10];
	cr_assert_eq(read_all(out, 10, false), 6);
	cr_assert_arr_eq(out, "456789", 6);
	cr_assert_eq(rxbuf_skip(&rb, 4), 0);
}

/* What urgent data needs (stream_urgent.c): a read that starts past the
 * mark's byte or stops at the mark, and the mark's byte wherever it came. */
Test(rxbuf, read_at_skips_then_stops_at_max)
{
	cr_assert_eq(rxbuf_put(&rb, 0, "ab!cd", 5), 0);
	uint8_t out[8] = {0};
	struct iovec v = {out, sizeof(out)};
	cr_assert_eq(rxbuf_read_at(&rb, 0, 2, &v, 1, true), 2, "up to the mark");
	cr_assert_eq(rb.head, 0, "a peek consumes nothing");
	cr_assert_eq(rxbuf_read_at(&rb, 0, 2, &v, 1, false), 2);
	cr_assert_eq(memcmp(out, "ab", 2), 0);
	cr_assert_eq(rxbuf_read_at(&rb, 1, SIZE_MAX, &v, 1, false), 2, "past the mark's byte");
	cr_assert_eq(memcmp(out, "cd", 2), 0);
	cr_assert_eq(rb.head, 5, "the skipped byte is consumed too");
	cr_assert_eq(rxbuf_read_at(&rb, 1, SIZE_MAX, &v, 1, false), 0, "nothing to skip");
	cr_assert_eq(rb.head, 5);
}

Test(rxbuf, byte_at_finds_held_bytes_only)
{
	cr_assert_eq(rxbuf_put(&rb, 0, "xy", 2), 0);
	cr_assert_eq(rxbuf_put(&rb, 10, "!", 1), 0);
	cr_assert_eq(rxbuf_byte_at(&rb, 1), 'y');
	cr_assert_eq(rxbuf_byte_at(&rb, 10), '!', "past a hole");
	cr_assert_eq(rxbuf_byte_at(&rb, 5), -1, "in the hole");
	cr_assert_eq(rxbuf_byte_at(&rb, 11), -1, "not come");
	uint8_t out[2];
	cr_assert_eq(read_all(out, 1, false), 1);
	cr_assert_eq(rxbuf_byte_at(&rb, 0), -1, "read already");
}

Test(rxbuf, window_update_after_a_quarter_read)
{
	static uint8_t big[4096];
	rxbuf_put(&rb, 0, big, 4096);
	uint64_t advertised = 0;
	uint8_t out[4096];
	read_all(out, 1023, false);
	cr_assert_not(rxbuf_update_due(&rb, advertised));
	read_all(out, 1, false);
	cr_assert(rxbuf_update_due(&rb, advertised), "a quarter of the window consumed");
	advertised = rb.head;
	cr_assert_not(rxbuf_update_due(&rb, advertised));
	/* A writer that filled the window is always told before the reader
	 * runs dry: draining everything crosses the threshold. */
	read_all(out, sizeof(out), false);
	cr_assert(rxbuf_update_due(&rb, advertised));
}

Test(rxbuf, a_drained_buffer_holds_no_memory)
{
	cr_assert_null(rb.ring, "nothing allocated before the first byte");
	rxbuf_put(&rb, 0, "abc", 3);
	cr_assert_not_null(rb.ring);
	uint8_t out[3];
	read_all(out, 3, false);
	cr_assert_null(rb.ring, "an idle stream keeps no buffer, as a kernel socket");
	rxbuf_put(&rb, 3, "def", 3);
	read_all(out, 3, false);
	cr_assert_arr_eq(out, "def", 3);
}

Test(rxbuf, a_drained_ring_is_reused_not_allocated_again)
{
	uint8_t out[3];
	rxbuf_put(&rb, 0, "abc", 3);
	uint8_t *first = rb.ring;
	read_all(out, 3, false);
	cr_assert_null(rb.ring);
	/* Another stream's next message takes the spare (no malloc). */
	struct rxbuf other;
	rxbuf_init(&other, 1u << 16);
	cr_assert_eq(rxbuf_put(&other, 0, "xyz", 3), 0);
	cr_assert_eq(other.ring, first, "the drained ring is reused");
	struct iovec v = {out, 3};
	cr_assert_eq(rxbuf_read(&other, &v, 1, false), 3);
	cr_assert_arr_eq(out, "xyz", 3);
	rxbuf_free(&other);
	cr_assert_eq(rxbuf_spares_release(), 1);
}

Test(rxbuf, small_spares_are_bounded_and_kept)
{
	static struct rxbuf many[RXBUF_SPARES + 3];
	uint8_t out[1];
	struct iovec v = {out, sizeof(out)};
	for (unsigned i = 0; i < RXBUF_SPARES + 3; i++) {
		rxbuf_init(&many[i], 1u << 16);
		cr_assert_eq(rxbuf_put(&many[i], 0, "m", 1), 0);
	}
	for (unsigned i = 0; i < RXBUF_SPARES + 3; i++) {
		cr_assert_eq(rxbuf_read(&many[i], &v, 1, false), 1);
		cr_assert_null(many[i].ring, "an idle stream keeps no buffer");
	}
	cr_assert_eq(rxbuf_spare_bytes(), 0, "the smallest rings are not counted against the budget");
	cr_assert_eq(rxbuf_spares_trim(UINT64_MAX), 0, "nor trimmed");
	cr_assert_eq(rxbuf_spares_release(), RXBUF_SPARES);
	for (unsigned i = 0; i < RXBUF_SPARES + 3; i++)
		rxbuf_free(&many[i]);
}

/* Fills rb to its whole window and reads it all back: the ring grows to the
 * window and is given up. */
static void fill_and_drain(struct rxbuf *r, uint64_t *seq)
{
	static uint8_t data[1u << 16], out[1u << 16];
	struct iovec v = {out, sizeof(out)};
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(*seq + i * 13);
	cr_assert_eq(rxbuf_put(r, *seq, data, sizeof(data)), 0);
	cr_assert_eq(r->size, r->cap);
	cr_assert_eq(rxbuf_read(r, &v, 1, false), sizeof(data));
	cr_assert_arr_eq(out, data, sizeof(data));
	cr_assert_null(r->ring);
	*seq += sizeof(data);
}

Test(rxbuf, a_bulk_reader_gets_its_drained_window_back_whole)
{
	struct rxbuf bulk;
	rxbuf_init(&bulk, 1u << 16);
	uint64_t seq = 0;
	fill_and_drain(&bulk, &seq);
	cr_assert_eq(rxbuf_spare_bytes(), 1u << 16, "the drained window is kept");
	/* The next small piece takes the whole window's ring, so the bytes
	 * after it need no growing and copying. */
	uint8_t *kept = NULL;
	cr_assert_eq(rxbuf_put(&bulk, seq, "x", 1), 0);
	kept = bulk.ring;
	cr_assert_eq(bulk.size, bulk.cap, "the ring it had, not the smallest");
	cr_assert_eq(rxbuf_spare_bytes(), 0);
	cr_assert_eq(rxbuf_skip(&bulk, 1), 1);
	seq++;
	/* Another stream that never held more than a little does not take it. */
	struct rxbuf small;
	rxbuf_init(&small, 1u << 16);
	cr_assert_eq(rxbuf_put(&small, 0, "y", 1), 0);
	cr_assert_neq(small.ring, kept);
	cr_assert_eq(small.size, RXBUF_MIN_RING);
	rxbuf_free(&small);
	rxbuf_free(&bulk);
}

Test(rxbuf, untaken_spares_are_trimmed_and_the_budget_holds)
{
	static struct rxbuf r[RXBUF_SPARE_BYTES / (1u << 16) + 2];
	unsigned n = sizeof(r) / sizeof(r[0]);
	static uint8_t data[1u << 16];
	for (unsigned i = 0; i < n; i++) {
		rxbuf_init(&r[i], 1u << 16);
		cr_assert_eq(rxbuf_put(&r[i], 0, data, sizeof(data)), 0);
	}
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(rxbuf_skip(&r[i], sizeof(data)), sizeof(data));
	cr_assert_eq(rxbuf_spare_bytes(), RXBUF_SPARE_BYTES, "kept up to the budget, no more");
	uint64_t t = 5 * RXBUF_TRIM_NS;
	/* One taken since the last trim: its class stays. */
	uint64_t seq = sizeof(data);
	fill_and_drain(&r[0], &seq);
	cr_assert_eq(rxbuf_spares_trim(t), 0, "a class in use is kept");
	cr_assert_eq(rxbuf_spares_trim(t + RXBUF_TRIM_NS / 2), 0, "not trimmed again so soon");
	cr_assert_eq(rxbuf_spares_trim(t + RXBUF_TRIM_NS), RXBUF_SPARE_BYTES / sizeof(data),
		     "untaken for a whole trim period: given back");
	cr_assert_eq(rxbuf_spare_bytes(), 0);
	for (unsigned i = 0; i < n; i++)
		rxbuf_free(&r[i]);
}

Test(rxbuf, the_ring_grows_to_the_window_keeping_holes)
{
	struct rxbuf big;
	rxbuf_init(&big, 1u << 16);
	static uint8_t data[1u << 16];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 31 + 7);
	/* Small pieces first (a small ring), with a hole, then a far piece
	 * that needs the whole window. */
	cr_assert_eq(rxbuf_put(&big, 100, data + 100, 100), 0);
	cr_assert_eq(rxbuf_put(&big, 0, data, 50), 0);
	cr_assert_leq(big.size, RXBUF_MIN_RING);
	cr_assert_eq(rxbuf_put(&big, 60000, data + 60000, sizeof(data) - 60000), 0);
	cr_assert_eq(big.size, big.cap);
	cr_assert_eq(rxbuf_put(&big, 50, data + 50, 50), 0);
	cr_assert_eq(rxbuf_put(&big, 200, data + 200, 60000 - 200), 0);
	cr_assert_eq(rxbuf_avail(&big), sizeof(data));
	static uint8_t out[1u << 16];
	struct iovec v = {out, sizeof(out)};
	cr_assert_eq(rxbuf_read(&big, &v, 1, false), sizeof(data));
	cr_assert_arr_eq(out, data, sizeof(data));
	cr_assert_null(big.ring);
	rxbuf_free(&big);
}
