/*
 * An in-process nic for protocol tests: nics opened on one fabric exchange
 * packets through bounded in-memory queues, deterministically. Faults are
 * injected by the rpc layer (FERRY_FAULT), not here.
 */
#ifndef FERRY_NIC_TEST_H
#define FERRY_NIC_TEST_H

#include "transport/nic.h"

struct nic_test_fabric;

struct nic_test_fabric *nic_test_fabric_create(void);
/* All nics on the fabric must be closed first. */
void nic_test_fabric_destroy(struct nic_test_fabric *fabric);

/*
 * max_pkt_size: bytes per packet, header included; queue_len: receive buffers.
 * As on a NIC, a buffer is either posted (free), queued for rx_burst, or held
 * by the owner until post_recvs; a packet that finds none free is dropped and
 * counted (nic_test_overflows, and stats drop_nomem). tx_burst copies each
 * packet into the receiver's buffer at once, so flush has nothing to wait
 * for and delivery is in order. Packets larger than either side's
 * max_pkt_size, or sent to a closed nic, are lost (oversize counts as
 * drop_size). Any nic may be used from its own thread; the fabric locks.
 * Returns NULL on bad arguments or no memory.
 */
struct nic *nic_test_open(struct nic_test_fabric *fabric, uint32_t max_pkt_size,
			  unsigned queue_len, struct ferry_stats *stats);

/* Loses the nth packet to arrive at nic from now on (1 = the next one), as
 * a wire would: silently. Up to 16 pending; -ENOSPC beyond. */
int nic_test_lose_arrival(struct nic *nic, uint64_t nth);

/* Packets dropped because a receive queue was full, for tests. */
uint64_t nic_test_overflows(const struct nic *nic);

#endif
