/* Extras of the kernel UDP nic (nic_udp_open is declared in nic.h with the other back-ends). */
#ifndef FERRY_NIC_UDP_H
#define FERRY_NIC_UDP_H

#include <stdint.h>

#include "transport/nic.h"

/*
 * Packets tx_burst could not hand to the kernel: a full socket (EAGAIN,
 * ENOBUFS: those are not accepted and the caller retransmits) or a hard
 * error for one destination (EMSGSIZE, ENETUNREACH...: that packet counts
 * as accepted and lost, so one bad peer does not stall a burst). For
 * diagnostics and tests; nic must come from nic_udp_open.
 */
uint64_t nic_udp_tx_failures(const struct nic *nic);

/*
 * A peer on loopback sends this many datagrams from the nic's socket
 * before it gets a connected socket of its own: a process that lives for
 * one connection (a fork-per-connection server's child) is done long
 * before, and its peer saves the socket's making and closing (eight system
 * calls each side). Other peers get theirs at once: the socket's path MTU
 * sizes what offload sends them, and its ECONNREFUSED says that their
 * port has gone.
 */
#define NIC_UDP_PEER_LAZY 64u

#endif
