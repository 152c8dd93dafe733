/* Stream receive side, kept packets: bytes read from where they landed
 * next to bytes copied into the ring, and every kept buffer given back
 * exactly once, when the reader is past it and not before. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "preload/rxbuf.h"

#define NBUFS 200

static struct rxbuf rb;
/* Stand-ins for receive buffers: each "packet" is one of these. */
static uint8_t pkt[NBUFS][64];
static unsigned given_back[NBUFS];
static void *last_owner;
static int owner_tag;

static void release(void *owner, void *buf)
{
	last_owner = owner;
	given_back[(uint8_t(*)[64])buf - pkt]++;
}

static void setup(void)
{
	memset(given_back, 0, sizeof(given_back));
	last_owner = NULL;
	rxbuf_set_release(release);
	rxbuf_init(&rb, 4096);
}

static void teardown(void)
{
	rxbuf_free(&rb);
	rxbuf_spares_release();
	rxbuf_set_release(NULL);
}

/* Keeps len bytes of packet i, filled with text, as the next in order. */
static void keep(unsigned i, const char *text)
{
	size_t len = strlen(text);
	memcpy(pkt[i], text, len);
	cr_assert(rxbuf_keep_ready(&rb, rb.tail, len, &owner_tag));
	rxbuf_keep(&rb, pkt[i], len, pkt[i]);
}

static size_t read_some(char *out, size_t cap, bool peek)
{
	struct iovec v = {out, cap};
	return rxbuf_read(&rb, &v, 1, peek);
}

TestSuite(rxbuf_keep, .init = setup, .fini = teardown, .timeout = 10);

Test(rxbuf_keep, kept_and_copied_bytes_read_in_sequence)
{
	cr_assert_eq(rxbuf_put(&rb, 0, "abc", 3), 0);
	keep(0, "defg");
	cr_assert_eq(rxbuf_put(&rb, 7, "hi", 2), 0);
	keep(1, "jkl");
	cr_assert_eq(rxbuf_avail(&rb), 12);
	cr_assert_eq(rxbuf_kept(&rb), 2);
	char out[32];
	cr_assert_eq(read_some(out, sizeof(out), false), 12);
	cr_assert_arr_eq(out, "abcdefghijkl", 12);
	cr_assert_eq(given_back[0], 1);
	cr_assert_eq(given_back[1], 1);
	cr_assert_eq(last_owner, &owner_tag, "the buffer goes back to whom it came from");
	cr_assert_eq(rxbuf_kept(&rb), 0);
	cr_assert_null(rb.keep, "a drained stream keeps no record");
	cr_assert_null(rb.ring);
}

Test(rxbuf_keep, a_buffer_goes_back_only_when_read_through)
{
	keep(0, "0123456789");
	keep(1, "ABCDEFGHIJ");
	char out[32];
	cr_assert_eq(read_some(out, 4, false), 4);
	cr_assert_arr_eq(out, "0123", 4);
	cr_assert_eq(given_back[0], 0, "six of its bytes are still unread");
	cr_assert_eq(read_some(out, 8, false), 8);
	cr_assert_arr_eq(out, "456789AB", 8);
	cr_assert_eq(given_back[0], 1);
	cr_assert_eq(given_back[1], 0);
	cr_assert_eq(read_some(out, sizeof(out), false), 8);
	cr_assert_arr_eq(out, "CDEFGHIJ", 8);
	cr_assert_eq(given_back[1], 1);
}

Test(rxbuf_keep, peek_skip_and_byte_at_see_kept_bytes)
{
	keep(0, "peek");
	cr_assert_eq(rxbuf_put(&rb, 4, "aboo", 4), 0);
	char out[8];
	cr_assert_eq(read_some(out, 6, true), 6);
	cr_assert_arr_eq(out, "peekab", 6);
	cr_assert_eq(given_back[0], 0, "a peek consumes nothing");
	cr_assert_eq(rxbuf_byte_at(&rb, 2), 'e');
	cr_assert_eq(rxbuf_byte_at(&rb, 5), 'b');
	struct iovec v = {out, 3};
	cr_assert_eq(rxbuf_read_at(&rb, 3, 3, &v, 1, false), 3);
	cr_assert_arr_eq(out, "kab", 3);
	cr_assert_eq(given_back[0], 1, "skipped and read through");
	cr_assert_eq(rxbuf_skip(&rb, 5), 2);
	cr_assert_eq(rxbuf_avail(&rb), 0);
}

Test(rxbuf_keep, only_the_next_bytes_in_order_are_kept)
{
	cr_assert_not(rxbuf_keep_ready(&rb, 5, 4, &owner_tag), "past a gap");
	cr_assert_eq(rxbuf_put(&rb, 10, "zz", 2), 0);
	cr_assert_not(rxbuf_keep_ready(&rb, 0, 4, &owner_tag), "with a hole pending");
	cr_assert_eq(rxbuf_put(&rb, 0, "0123456789", 10), 0);
	cr_assert(rxbuf_keep_ready(&rb, 12, 4, &owner_tag), "the hole filled");
	cr_assert_not(rxbuf_keep_ready(&rb, 12, 4096, &owner_tag), "past the window");
	cr_assert_not(rxbuf_keep_ready(&rb, 12, 4, &last_owner), "another owner's buffer");
}

Test(rxbuf_keep, a_full_record_sends_later_bytes_to_the_ring)
{
	char text[3] = "a";
	for (unsigned i = 0; i < RXBUF_KEPT_MAX; i++) {
		text[0] = (char)('a' + i % 26);
		keep(i, text);
	}
	cr_assert_not(rxbuf_keep_ready(&rb, rb.tail, 1, &owner_tag));
	cr_assert_eq(rxbuf_put(&rb, rb.tail, "!", 1), 0);
	char out[RXBUF_KEPT_MAX + 1];
	cr_assert_eq(read_some(out, sizeof(out), false), RXBUF_KEPT_MAX + 1);
	for (unsigned i = 0; i < RXBUF_KEPT_MAX; i++) {
		cr_assert_eq(out[i], 'a' + i % 26);
		cr_assert_eq(given_back[i], 1);
	}
	cr_assert_eq(out[RXBUF_KEPT_MAX], '!');
}

Test(rxbuf_keep, the_record_wraps_around)
{
	char out[2];
	unsigned n = 3 * RXBUF_KEPT_MAX, back = 0;
	for (unsigned i = 0; i < n; i++) {
		char text[3] = {(char)('a' + i % 26), (char)('A' + i % 26), 0};
		keep(i % NBUFS, text);
		if (i == 0)
			continue;
		cr_assert_eq(read_some(out, 2, false), 2);
		cr_assert_eq(out[0], 'a' + (i - 1) % 26);
		cr_assert_eq(out[1], 'A' + (i - 1) % 26);
	}
	for (unsigned b = 0; b < NBUFS; b++)
		back += given_back[b];
	cr_assert_eq(back, n - 1);
	cr_assert_eq(rxbuf_kept(&rb), 1);
	cr_assert_eq(rxbuf_avail(&rb), 2);
}

Test(rxbuf_keep, free_gives_back_and_abandon_forgets)
{
	keep(0, "abcd");
	keep(1, "efgh");
	rxbuf_free(&rb);
	cr_assert_eq(given_back[0], 1);
	cr_assert_eq(given_back[1], 1);
	rxbuf_init(&rb, 4096);
	keep(2, "ijkl");
	rxbuf_abandon(&rb);
	cr_assert_eq(given_back[2], 0, "the owner is gone: nothing goes back to it");
	cr_assert_null(rb.keep);
}

Test(rxbuf_keep, nothing_is_kept_without_a_way_back)
{
	rxbuf_set_release(NULL);
	cr_assert_not(rxbuf_keep_ready(&rb, 0, 4, &owner_tag));
}
