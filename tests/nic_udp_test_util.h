/* Helpers for the UDP nic's tests: a nic, loopback, a peer, a pair of nics,
 * packets of known bytes, waiting for packets, the next free descriptor. */
#ifndef FERRY_TEST_NIC_UDP_UTIL_H
#define FERRY_TEST_NIC_UDP_UTIL_H

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/config.h"
#include "transport/nic.h"
#include "transport/nic_udp.h"
#include "transport/stats.h"

static const struct sockaddr_in loopback4 = {
	.sin_family = AF_INET, .sin_port = 9, .sin_addr.s_addr = 0x0100007f /* 127.0.0.1 */};

static inline struct nic *open_nic(const struct ferry_config *cfg, struct ferry_stats *st)
{
	char msg[256] = "";
	int err = 0;
	struct nic *n = nic_udp_open(cfg, st, &err, msg, sizeof(msg));
	cr_assert_not_null(n, "nic_udp_open: %d %s", err, msg);
	cr_assert_str_eq(n->name, "udp");
	cr_assert_not(nic_pins_memory(n));
	return n;
}

/* A peer of from that reaches to over loopback. */
static inline struct nic_peer *peer_to(struct nic *from, struct nic *to)
{
	struct nic_route r;
	nic_local_route(to, &r);
	nic_route_fixup(from, &r, (const struct sockaddr *)&loopback4, sizeof(loopback4));
	struct nic_peer *p;
	cr_assert_eq(nic_peer_create(from, &r, &p), 0);
	return p;
}

/* Waits (briefly) for the nic's socket, then takes what is there. */
static inline unsigned rx_wait(struct nic *n, struct nic_rx *out, unsigned max)
{
	for (int tries = 0; tries < 100; tries++) {
		unsigned got = nic_rx_burst(n, out, max);
		if (got)
			return got;
		if (nic_arm_notify(n) == 0) {
			struct pollfd pfd = {.fd = nic_notify_fd(n), .events = POLLIN};
			poll(&pfd, 1, 20);
		}
	}
	return 0;
}

/* Takes packets into rx[got..total), at most step a call, until all are
 * in: waiting for the socket (wait), or split from what was received
 * already, where every call must give some. */
static inline void rx_all(struct nic *n, struct nic_rx *rx, unsigned got, unsigned total,
			  unsigned step, bool wait)
{
	while (got < total) {
		unsigned want = total - got < step ? total - got : step;
		unsigned k = wait ? rx_wait(n, rx + got, want) : nic_rx_burst(n, rx + got, want);
		cr_assert_gt(k, 0, "only %u of %u arrived", got, total);
		got += k;
	}
}

struct pair {
	struct ferry_config cfg;
	struct ferry_stats sa, sb;
	struct nic *a, *b;
	struct nic_peer *a_to_b;
	uint16_t b_port;
};

/* The port is the last number of "udp:[host]:port". */
static inline uint16_t route_port(const struct nic *n, const struct nic_route *r)
{
	char buf[96];
	nic_route_format(n, r, buf, sizeof(buf));
	const char *colon = strrchr(buf, ':');
	cr_assert_not_null(colon, "%s", buf);
	return (uint16_t)atoi(colon + 1);
}

static inline void pair_open_gso(struct pair *p, unsigned mtu, enum ferry_udp_gso_mode gso)
{
	memset(p, 0, sizeof(*p));
	ferry_config_defaults(&p->cfg);
	p->cfg.mtu = mtu;
	p->cfg.udp_gso = gso;
	p->a = open_nic(&p->cfg, &p->sa);
	p->b = open_nic(&p->cfg, &p->sb);
	struct nic_route r;
	nic_local_route(p->b, &r);
	cr_assert_eq(r.kind, FERRY_TRANSPORT_UDP);
	p->b_port = route_port(p->b, &r);
	cr_assert_neq(p->b_port, 0);
	nic_route_fixup(p->a, &r, (const struct sockaddr *)&loopback4, sizeof(loopback4));
	cr_assert_eq(nic_peer_create(p->a, &r, &p->a_to_b), 0);
}

static inline void pair_open(struct pair *p, unsigned mtu)
{
	pair_open_gso(p, mtu, FERRY_UDP_GSO_AUTO);
}

static inline void pair_close(struct pair *p)
{
	nic_peer_destroy(p->a, p->a_to_b);
	nic_close(p->a);
	nic_close(p->b);
}

/* Byte i of packet seq. A packet never starts with the bundle mark 0xB7 (a
 * real one starts with PKTHDR_MAGIC), so neither does a test packet. */
static inline uint8_t pattern(uint32_t seq, uint32_t i)
{
	uint8_t v = (uint8_t)(seq * 131 + i * 7 + (i >> 8));
	return i == 0 && v == 0xB7 ? 0xF5 : v;
}

static inline void fill(uint8_t *buf, uint32_t len, uint32_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		buf[i] = pattern(seq, i);
}

static inline void check(const struct nic_rx *rx, uint32_t len, uint32_t seq)
{
	cr_assert_eq(rx->len, len, "packet %u: %u bytes, sent %u", seq, rx->len, len);
	for (uint32_t i = 0; i < len; i++)
		cr_assert_eq(rx->pkt[i], pattern(seq, i), "packet %u byte %u", seq, i);
}

/* One packet as two sges: up to 32 header bytes, the rest from elsewhere. */
static inline void make_tx(struct nic_tx *tx, struct nic_peer *to, const uint8_t *buf,
			   uint32_t len, uint8_t *split_copy)
{
	uint32_t h = len < 32 ? len : 32;
	memcpy(split_copy, buf, h);
	*tx = (struct nic_tx){.peer = to, .nsge = 2};
	tx->sge[0] = (struct nic_sge){.addr = split_copy, .len = h};
	tx->sge[1] = (struct nic_sge){.addr = buf + h, .len = len - h};
}

/* The number open() hands out next. */
static inline int lowest_free_fd(void)
{
	int fd = open("/dev/null", O_RDONLY);
	cr_assert_geq(fd, 0, "open: %s", strerror(errno));
	close(fd);
	return fd;
}

#endif
