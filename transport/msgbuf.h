/*
 * A message buffer: one contiguous data region in registered memory.
 * Packet 0's header sits directly before the data, so a small message goes
 * out as one piece; headers of packets 1..n-1 sit after the largest data the
 * buffer can hold (eRPC's layout):
 *
 *   [hdr 0][data .................. max_data_size][pad][hdr 1][hdr 2]...
 */
#ifndef FERRY_MSGBUF_H
#define FERRY_MSGBUF_H

#include <stddef.h>
#include <stdint.h>

#include "transport/pkthdr.h"

struct pool;

struct msgbuf {
	uint8_t *buf;            /* the data */
	uint32_t data_size;      /* bytes of data in use */
	uint32_t max_data_size;  /* capacity, fixed at allocation */
	uint32_t max_pkts;       /* header slots: packets at RPC_MIN_PKT_DATA each */
	uint32_t lkey;           /* of the registered region holding it */
	void *chunk;             /* the pool allocation behind it */
};

/* Bytes of pool memory a msgbuf of max_data_size needs (headers included). */
size_t msgbuf_alloc_size(uint32_t max_data_size);

/* Lays a msgbuf over mem, which holds msgbuf_alloc_size(max_data_size) bytes. */
void msgbuf_init(struct msgbuf *m, uint8_t *mem, uint32_t max_data_size, uint32_t lkey,
		 void *chunk);

/* Header of packet k; k < max_pkts. */
static inline struct pkthdr *msgbuf_pkthdr(const struct msgbuf *m, uint32_t k)
{
	if (k == 0)
		return (struct pkthdr *)(void *)(m->buf - PKTHDR_SIZE);
	size_t tail = ((size_t)m->max_data_size + 7u) & ~(size_t)7u;
	return (struct pkthdr *)(void *)(m->buf + tail + (size_t)(k - 1) * PKTHDR_SIZE);
}

/* Sets the bytes in use; size must not exceed max_data_size. */
static inline void msgbuf_resize(struct msgbuf *m, uint32_t size)
{
	m->data_size = size;
}

#endif
