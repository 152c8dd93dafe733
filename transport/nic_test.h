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

/* max_pkt_size: bytes per packet, header included; queue_len: receive queue depth
 * (a packet arriving at a full queue is dropped, as a NIC would). */
struct nic *nic_test_open(struct nic_test_fabric *fabric, uint32_t max_pkt_size,
			  unsigned queue_len, struct ferry_stats *stats);

/* Packets dropped because a receive queue was full, for tests. */
uint64_t nic_test_overflows(const struct nic *nic);

#endif
