/*
 * The kernel UDP nic's insides, shared by nic_udp.c (sockets, bundles,
 * batching, receive buffers) and nic_udp_gso.c (segmentation offload).
 * Nothing outside those two files includes it.
 */
#ifndef FERRY_NIC_UDP_INTERNAL_H
#define FERRY_NIC_UDP_INTERNAL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "transport/config.h"
#include "transport/nic.h"

/* The largest UDP payload over IPv4 (65535 - 20 IP - 8 UDP); IPv6 allows 20
 * more, but a dual-stack socket may be sending to a v4-mapped peer. */
#define NIC_UDP_MAX_PAYLOAD 65507u
/* Packets per sendmmsg/recvmmsg call. */
#define NIC_UDP_BATCH 64u
/* Receive buffers the nic owns. They are mapped, not touched up front, so a
 * small packet commits one page of its 64 KB buffer, not all of it. */
#define NIC_UDP_RX_BUFS 256u
/* A receive buffer that takes whatever UDP GRO coalesces (at most 64 KB). */
#define NIC_UDP_GRO_BUF 65536u
/* Socket buffer wanted each way: the rpc layer keeps up to 32 packets of
 * 64 KB in flight per session; this holds two sessions' full windows. */
#define NIC_UDP_SOCKBUF (4 * 1024 * 1024)

/*
 * Bundles: a burst often holds several small packets for one peer (a batch
 * of requests, the answers to many connections of one client process), and
 * each datagram costs the kernel far more than its bytes. Consecutive
 * packets to one peer that fit together travel as one datagram: an 8-byte
 * bundle header (mark, version, count little endian, zeros), then per packet
 * an 8-byte frame (length little endian, zeros) and the packet, padded to 8
 * bytes so every packet header stays aligned. A packet header's first byte is
 * PKTHDR_MAGIC, never the mark, so a lone packet needs no framing.
 */
#define UDP_BUNDLE_MARK 0xB7u
#define UDP_BUNDLE_VERSION 1u
#define UDP_BUNDLE_HDR 8u
#define UDP_FRAME_HDR 8u
#define UDP_BUNDLE_MAX 64u
/* Packets split out beyond what the caller asked for wait here. Received
 * datagrams are split one at a time, and only while the caller has room,
 * so at most one datagram's packets (a full bundle) overflow. */
#define NIC_UDP_PENDING UDP_BUNDLE_MAX
/* Per datagram: the bundle header, then per packet a frame, two sges, padding. */
#define NIC_UDP_TX_IOVS (NIC_UDP_BATCH * 5u)
/* Room for one control message carrying an int (UDP_SEGMENT sends a
 * uint16_t, UDP_GRO receives an int). */
#define NIC_UDP_CMSG_SPACE CMSG_SPACE(sizeof(int))

union nic_udp_cmsg_buf {
	struct cmsghdr align;
	uint8_t bytes[NIC_UDP_CMSG_SPACE];
};

struct nic_peer {
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} addr;
	socklen_t len;
	/* A socket of its own, connected to the peer, or -1 (then the nic's
	 * socket sends with the address). A connected socket keeps its route,
	 * so each send skips the lookup an unconnected one makes. */
	int fd;
	/* Datagrams a peer on loopback sends from the nic's socket before it
	 * gets one of its own (0: it has one, or tried): NIC_UDP_PEER_LAZY. */
	uint32_t lazy_left;
	/* The largest UDP payload the route to the peer carries unfragmented,
	 * from the connected socket's IP_MTU; 0 when unknown. */
	uint32_t path_payload;
	/* The kernel refused a segmented send to this peer (nic_udp_gso.c):
	 * its packets go as plain datagrams from then on. */
	bool gso_refused;
	/* Its port refused a datagram (ECONNREFUSED): the process is gone.
	 * Written by the sender, read by anyone (atomic). */
	bool gone;
};

struct nic_udp {
	struct nic base;
	int fd;
	int family; /* AF_INET6 (dual stack) or AF_INET */
	uint16_t port;
	bool wide;  /* bound to the wildcard; else to 127.0.0.1 (udp_bind.h) */
	uint64_t tx_failures;
	enum ferry_udp_gso_mode gso_mode; /* FERRY_UDP_GSO */
	bool gso;   /* sends may be segmented by the kernel (UDP_SEGMENT) */
	bool gro;   /* the socket receives coalesced datagrams (UDP_GRO) */

	uint8_t *bufs; /* NIC_UDP_RX_BUFS buffers of stride bytes, mmap'ed */
	size_t stride, map_len;
	uint32_t free_stack[NIC_UDP_RX_BUFS];
	unsigned nfree;
	/* Packets of each buffer held by the owner (a bundle's or a coalesced
	 * datagram's share one), plus one while rx_burst has not split all of
	 * it, to reuse it only when all are back and to catch double returns.
	 * A coalesced buffer holds at most 64 KB / 16 bytes of packets. */
	uint16_t refs[NIC_UDP_RX_BUFS];

	struct mmsghdr rx_msgs[NIC_UDP_BATCH];
	struct iovec rx_iov[NIC_UDP_BATCH];
	uint32_t rx_idx[NIC_UDP_BATCH]; /* each receive slot's buffer */
	unsigned rx_filled;
	/* Slots [rx_next, rx_ready) were received and are not split yet; the
	 * next datagram of slot rx_next starts at rx_off. rx_seg is each
	 * slot's segment size under GRO, 0 for a single datagram. */
	unsigned rx_next, rx_ready;
	uint32_t rx_off;
	uint32_t rx_seg[NIC_UDP_BATCH];
	union nic_udp_cmsg_buf rx_cmsg[NIC_UDP_BATCH];
	/* The last receive found at most one datagram: the next one takes a
	 * single datagram with recv, which costs the kernel less than
	 * recvmmsg and skips recvmmsg's second, failing attempt. */
	bool rx_sparse;
	struct nic_rx pending[NIC_UDP_PENDING];
	unsigned pending_head, pending_n;

	struct mmsghdr tx_msgs[NIC_UDP_BATCH];
	unsigned tx_pkts[NIC_UDP_BATCH]; /* packets in each datagram */
	int tx_fd[NIC_UDP_BATCH];        /* the socket each datagram leaves from */
	struct iovec tx_iov[NIC_UDP_TX_IOVS];
	uint8_t tx_hdr[NIC_UDP_BATCH][UDP_BUNDLE_HDR];
	uint8_t tx_frame[NIC_UDP_BATCH][UDP_FRAME_HDR];
	union nic_udp_cmsg_buf tx_cmsg[NIC_UDP_BATCH];
};

/* Bytes of one outgoing packet. */
static inline uint32_t nic_tx_len(const struct nic_tx *p)
{
	uint32_t len = 0;
	for (unsigned s = 0; s < p->nsge; s++)
		len += p->sge[s].len;
	return len;
}

/* nic_udp_gso.c */

/* Turns segmentation offload on for the nic's socket as FERRY_UDP_GSO says,
 * if the kernel takes the options; says once why not, and counts it. */
void udp_gso_start(struct nic_udp *u);
/* The same socket options on a socket that replaced the nic's (widen). */
void udp_gso_restart(struct nic_udp *u);
/* How many of pkts[0..k) go in one segmented send: consecutive packets to
 * one peer of one size (the last may be shorter), within the kernel's
 * limits. 1 when segmentation does not apply. */
unsigned udp_gso_extent(const struct nic_udp *u, const struct nic_tx *pkts, unsigned k);
/* Marks datagram m of tx_msgs as segmented at seg bytes. */
void udp_gso_attach(struct nic_udp *u, unsigned m, uint32_t seg);
/* Counts datagram m of tx_msgs, the kernel having taken it, if segmented. */
void udp_gso_sent(struct nic_udp *u, unsigned m);
/* A segmented datagram m failed with err. True when the kernel refused the
 * segmentation itself: the peer then sends plainly, and the caller sends
 * the datagram's packets again that way; false for any other failure. */
bool udp_gso_refused(struct nic_udp *u, struct nic_peer *peer, unsigned m, int err);
/* Gives every receive slot room for a UDP_GRO control message under GRO,
 * none without; once, and again when GRO changes (widen). */
void udp_gro_arm(struct nic_udp *u);
/* The segment size of what receive slot i received: 0 for one datagram,
 * UINT32_MAX for a coalesced datagram that cannot be split (counted).
 * Gives the slot its control room back for the next receive. */
uint32_t udp_gro_segment(struct nic_udp *u, unsigned i);

#endif
