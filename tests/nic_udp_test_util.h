/* Helpers for the UDP nic's tests: a nic, loopback, a peer, waiting for
 * packets, the next free descriptor. */
#ifndef FERRY_TEST_NIC_UDP_UTIL_H
#define FERRY_TEST_NIC_UDP_UTIL_H

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
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

/* The number open() hands out next. */
static inline int lowest_free_fd(void)
{
	int fd = open("/dev/null", O_RDONLY);
	cr_assert_geq(fd, 0, "open: %s", strerror(errno));
	close(fd);
	return fd;
}

#endif
