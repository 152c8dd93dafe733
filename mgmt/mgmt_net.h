/* Kernel UDP for the management thread: addresses, sockets, ICMP errors, path MTU. */
#ifndef FERRY_MGMT_NET_H
#define FERRY_MGMT_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* A peer address, IPv4-mapped IPv6 addresses folded to plain IPv4 so one
 * host has one spelling whatever socket family saw it. */
struct mgmt_addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

/* Copies sa into out, normalised. -EAFNOSUPPORT unless IPv4 or IPv6,
 * -EINVAL if len is short for the family. */
int mgmt_addr_set(struct mgmt_addr *out, const struct sockaddr *sa, socklen_t len);
bool mgmt_addr_equal(const struct mgmt_addr *a, const struct mgmt_addr *b);
uint16_t mgmt_addr_port(const struct mgmt_addr *a);
void mgmt_addr_set_port(struct mgmt_addr *a, uint16_t port);
int mgmt_addr_family(const struct mgmt_addr *a);
/* "1.2.3.4:80" or "[::1]:80". */
void mgmt_addr_format(const struct mgmt_addr *a, char *buf, size_t cap);

/* mgmt_net_socket flags */
#define MGMT_NET_RECVERR 1u   /* queue ICMP errors (IP_RECVERR), which an unconnected socket drops */
#define MGMT_NET_REUSEPORT 2u /* SO_REUSEPORT: share the port, as the TCP listener beside it does */
#define MGMT_NET_V6ONLY 4u    /* IPV6_V6ONLY, as the TCP listener beside it has */
#define MGMT_NET_LOOPBACK 8u  /* with addr NULL: 127.0.0.1 or ::1, not the wildcard */

/*
 * A nonblocking UDP socket of the family, bound to addr (or to the wildcard
 * address, port 0, when addr is NULL), with MGMT_NET_* flags.
 * Returns the fd or -errno (-EADDRINUSE when the port is taken).
 */
int mgmt_net_socket(int family, const struct mgmt_addr *addr, unsigned flags);
/* A socket like mgmt_net_socket(family, NULL, flags) would make, on the
 * wildcard at old's port while old still holds it (udp_bind.h). The caller
 * closes old. The fd or -errno. */
int mgmt_net_widen(int old, int family, unsigned flags);

/*
 * Takes one entry off the socket's error queue: *dest is the destination
 * of the datagram that failed, *err the errno the ICMP error stands for
 * (ECONNREFUSED for port unreachable). Returns 1, 0 when the queue is empty,
 * or -errno.
 */
int mgmt_net_read_error(int fd, struct mgmt_addr *dest, int *err);

/*
 * Largest packet (transport header and payload) that crosses the path to
 * addr without IP fragmentation: the route MTU the kernel knows minus the
 * IP and UDP headers. 0 when the kernel cannot tell.
 */
uint32_t mgmt_net_udp_payload_max(const struct mgmt_addr *addr);
/* How many times this process asked the kernel so (for tests). */
uint64_t mgmt_net_mtu_asks(void);

/* Sends one datagram; never blocks. Returns 0 or -errno. */
int mgmt_net_send(int fd, const void *buf, size_t len, const struct sockaddr *to,
		  socklen_t tolen);

/* 64 random bits from getrandom(2), never 0. */
uint64_t mgmt_net_random64(void);

#endif
