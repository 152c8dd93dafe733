/* msgbuf layout (eRPC's): header 0 before the data, the rest after it. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "transport/msgbuf.h"

Test(msgbuf, first_header_directly_before_data)
{
	uint8_t *mem = calloc(1, msgbuf_alloc_size(5000));
	struct msgbuf m;
	msgbuf_init(&m, mem, 5000, 7, NULL);
	cr_assert_eq((uint8_t *)msgbuf_pkthdr(&m, 0) + PKTHDR_SIZE, m.buf);
	cr_assert_eq((uint8_t *)msgbuf_pkthdr(&m, 0), mem);
	cr_assert_eq(m.data_size, 5000);
	cr_assert_eq(m.lkey, 7);
	free(mem);
}

Test(msgbuf, later_headers_follow_the_largest_data_and_fit)
{
	const uint32_t sizes[] = {0, 1, 7, 8, 991, 992, 993, 5000, 65536, RPC_MAX_MSG_SIZE};
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t max = sizes[i];
		size_t total = msgbuf_alloc_size(max);
		uint8_t *mem = malloc(total);
		struct msgbuf m;
		msgbuf_init(&m, mem, max, 0, NULL);
		cr_assert_eq(m.max_pkts, pkt_count(max, RPC_MIN_PKT_DATA));
		uint8_t *end_data = m.buf + max;
		for (uint32_t k = 1; k < m.max_pkts; k++) {
			uint8_t *h = (uint8_t *)msgbuf_pkthdr(&m, k);
			cr_assert_geq(h, end_data, "header %u overlaps data (max %u)", k, max);
			cr_assert_eq((uintptr_t)(h - mem) % 8, 0, "header %u unaligned", k);
			cr_assert_leq(h + PKTHDR_SIZE, mem + total, "header %u past the end", k);
			if (k > 1)
				cr_assert_eq(h, (uint8_t *)msgbuf_pkthdr(&m, k - 1) + PKTHDR_SIZE);
		}
		/* Shrinking the data never moves a header. */
		struct pkthdr *last = msgbuf_pkthdr(&m, m.max_pkts - 1);
		msgbuf_resize(&m, max / 2);
		cr_assert_eq(msgbuf_pkthdr(&m, m.max_pkts - 1), last);
		free(mem);
	}
}

Test(msgbuf, sizes_use_no_more_than_headers_need)
{
	/* header area: one per packet at the smallest payload any session uses */
	cr_assert_eq(msgbuf_alloc_size(0), PKTHDR_SIZE);
	cr_assert_eq(msgbuf_alloc_size(992), PKTHDR_SIZE + 992);
	cr_assert_eq(msgbuf_alloc_size(993), PKTHDR_SIZE + 1000 + PKTHDR_SIZE);
}
