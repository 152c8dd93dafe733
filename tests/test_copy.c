/* copy_bytes gives memcpy's bytes at every length and every distance
 * between source and destination, the near ones it copies in pieces
 * included, and writes nothing outside the destination. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport/copy.h"

#define SPAN (3u * 65536u)

static uint8_t *src_area, *dst_area, *want_area;

static void setup(void)
{
	src_area = aligned_alloc(4096, SPAN);
	dst_area = aligned_alloc(4096, SPAN);
	want_area = aligned_alloc(4096, SPAN);
	cr_assert(src_area && dst_area && want_area);
	for (size_t i = 0; i < SPAN; i++)
		src_area[i] = (uint8_t)(i * 131u + (i >> 8) * 7u + 1u);
}

static void teardown(void)
{
	free(src_area);
	free(dst_area);
	free(want_area);
}

TestSuite(copy, .init = setup, .fini = teardown);

/* One copy of len bytes from offset so to offset dof, checked against a
 * byte-by-byte reference over the whole destination area. */
static void check(size_t so, size_t dof, size_t len)
{
	memset(dst_area, 0xA5, SPAN);
	memset(want_area, 0xA5, SPAN);
	for (size_t i = 0; i < len; i++)
		want_area[dof + i] = src_area[so + i];
	copy_bytes(dst_area + dof, src_area + so, len);
	cr_assert(memcmp(dst_area, want_area, SPAN) == 0,
		  "copy of %zu bytes from +%zu to +%zu differs from memcpy's", len, so, dof);
}

Test(copy, every_distance_and_length_gives_the_same_bytes)
{
	static const size_t lens[] = {0, 1, 63, 2047, COPY_PIECE, COPY_PIECE + 1, 4095, 4096,
				      4097, 3 * COPY_PIECE, 65536 + 13};
	static const size_t dists[] = {0, 1, 8, 16, 31, 32, 63, 64, 65, 2048, 4033, 4095};
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
		for (size_t d = 0; d < sizeof(dists) / sizeof(dists[0]); d++) {
			/* dst ahead of src by the distance, and behind it */
			check(100, 100 + dists[d], lens[l]);
			check(100 + dists[d], 100, lens[l]);
			/* across a page boundary, src near its end */
			check(4096 - 7, 4096 - 7 + dists[d], lens[l]);
		}
}
