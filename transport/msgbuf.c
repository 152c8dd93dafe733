/* msgbuf layout. */
#include "autoconfig.h"

#include "transport/msgbuf.h"

static uint32_t header_slots(uint32_t max_data_size)
{
	return pkt_count(max_data_size, RPC_MIN_PKT_DATA);
}

size_t msgbuf_alloc_size(uint32_t max_data_size)
{
	size_t tail = ((size_t)max_data_size + 7u) & ~(size_t)7u;
	return PKTHDR_SIZE + tail + (size_t)(header_slots(max_data_size) - 1) * PKTHDR_SIZE;
}

void msgbuf_init(struct msgbuf *m, uint8_t *mem, uint32_t max_data_size, uint32_t lkey,
		 void *chunk)
{
	m->buf = mem + PKTHDR_SIZE;
	m->data_size = max_data_size;
	m->max_data_size = max_data_size;
	m->max_pkts = header_slots(max_data_size);
	m->lkey = lkey;
	m->chunk = chunk;
}
