/* nic_ib on softib: two nics on one fabric in one process, through nic.h only. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "tests/softib_fixture.h"
#include "transport/config.h"
#include "transport/nic.h"
#include "transport/stats.h"
#include "transport/sys.h"

static char fabric[128];
static struct ferry_config cfg;
static struct ferry_stats stats_a, stats_b;
static struct nic *na, *nb;
static struct nic_peer *a_to_b, *b_to_a;
static uint8_t *mem;
static struct nic_mr mr;
#define MEM (1u << 20)

static struct nic *open_softib(struct ferry_stats *st)
{
	int err = 0;
	char msg[256] = "";
	struct nic *n = nic_open(&cfg, st, &err, msg, sizeof(msg));
	cr_assert_not_null(n, "nic_open(softib): %d %s", err, msg);
	return n;
}

static void setup(void)
{
	softib_test_fabric(fabric, sizeof(fabric), "nic");
	ferry_config_defaults(&cfg);
	char e[128];
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_TRANSPORT", "softib", e, sizeof(e)), 0);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_SOFTIB_FABRIC", fabric, e, sizeof(e)), 0);
	memset(&stats_a, 0, sizeof(stats_a));
	memset(&stats_b, 0, sizeof(stats_b));
	na = open_softib(&stats_a);
	nb = open_softib(&stats_b);
	struct nic_route ra, rb;
	nic_local_route(na, &ra);
	nic_local_route(nb, &rb);
	cr_assert_eq(nic_peer_create(na, &rb, &a_to_b), 0);
	cr_assert_eq(nic_peer_create(nb, &ra, &b_to_a), 0);
	mem = aligned_alloc(4096, MEM);
	memset(mem, 0, MEM);
	cr_assert_eq(nic_reg_mem(na, mem, MEM, &mr), 0);
}

static void teardown(void)
{
	nic_peer_destroy(na, a_to_b);
	nic_peer_destroy(nb, b_to_a);
	nic_dereg_mem(na, &mr);
	nic_close(na);
	nic_close(nb);
	free(mem);
	softib_test_fabric_remove(fabric);
}

TestSuite(softib_nic, .init = setup, .fini = teardown, .timeout = 30);

static struct nic_tx one(struct nic_peer *p, const void *addr, uint32_t len)
{
	return (struct nic_tx){.peer = p, .nsge = 1, .sge = {{addr, len, mr.lkey}}};
}

/* Receives exactly n packets (spinning a bounded number of times). */
static unsigned rx_n(struct nic *n, struct nic_rx *out, unsigned want)
{
	unsigned got = 0;
	for (int spins = 0; got < want && spins < 1000000; spins++)
		got += nic_rx_burst(n, out + got, want - got);
	return got;
}

Test(softib_nic, opens_with_the_port_mtu_and_a_softib_route)
{
	cr_assert_str_eq(na->name, "softib");
	/* The port says MTU 4096 and max_msg_sz 64 KiB; on softib nic_ib
	 * sends the latter (doc/softib.md). */
	cr_assert_eq(na->max_pkt_size, 65536);
	cr_assert_not(nic_pins_memory(na), "softib pins nothing");
	struct nic_route r;
	nic_local_route(na, &r);
	cr_assert_eq(r.kind, FERRY_TRANSPORT_SOFTIB);
	char buf[160];
	nic_route_format(na, &r, buf, sizeof(buf));
	cr_assert(strstr(buf, "softib gid ") && strstr(buf, "qpn 0x"), "%s", buf);
	nic_route_fixup(na, &r, NULL, 0);
	struct nic_route r2;
	nic_local_route(na, &r2);
	cr_assert_arr_eq(&r, &r2, sizeof(r), "fixup leaves an ib route alone");
}

Test(softib_nic, packets_arrive_whole_with_the_header_first)
{
	for (unsigned i = 0; i < 4096; i++)
		mem[i] = (uint8_t)(i * 13 + 5);
	/* Inline-sized, one SGE; large, two SGEs (header + data apart). */
	struct nic_tx tx[3] = {one(a_to_b, mem, 64), one(a_to_b, mem + 100, 4000),
			       {.peer = a_to_b, .nsge = 2,
				.sge = {{mem, 32, mr.lkey}, {mem + 8192, 3000, mr.lkey}}}};
	memset(mem + 8192, 0x77, 3000);
	cr_assert_eq(nic_tx_burst(na, tx, 3), 3);
	struct nic_rx rx[3];
	cr_assert_eq(rx_n(nb, rx, 3), 3);
	cr_assert_eq(rx[0].len, 64);
	cr_assert_arr_eq(rx[0].pkt, mem, 64);
	cr_assert_eq(((uintptr_t)rx[0].pkt) % 64, 0, "header 64-byte aligned behind the GRH");
	cr_assert_eq(rx[1].len, 4000);
	cr_assert_arr_eq(rx[1].pkt, mem + 100, 4000);
	cr_assert_eq(rx[2].len, 3032);
	cr_assert_arr_eq(rx[2].pkt, mem, 32);
	cr_assert_arr_eq(rx[2].pkt + 32, mem + 8192, 3000);
	void *bufs[3] = {rx[2].buf, rx[0].buf, rx[1].buf};
	nic_post_recvs(nb, bufs, 3);
	nic_flush(na);
	/* And the other way. */
	cr_assert_eq(nic_tx_burst(nb, &(struct nic_tx){.peer = b_to_a, .nsge = 1,
						       .sge = {{"pong", 5, 0}}},
				  1),
		     1, "an inline send needs no lkey");
	cr_assert_eq(rx_n(na, rx, 1), 1);
	cr_assert_str_eq((char *)rx[0].pkt, "pong");
	nic_post_recvs(na, &rx[0].buf, 1);
}

Test(softib_nic, oversize_packets_are_accepted_and_counted_lost)
{
	struct nic_tx tx[2] = {one(a_to_b, mem, na->max_pkt_size + 1), one(a_to_b, mem, 10)};
	cr_assert_eq(nic_tx_burst(na, tx, 2), 2);
	struct nic_rx rx[2];
	cr_assert_eq(rx_n(nb, rx, 2), 1);
	cr_assert_eq(rx[0].len, 10);
	cr_assert_eq(stats_a.drop_size, 1);
	nic_post_recvs(nb, &rx[0].buf, 1);
}

Test(softib_nic, many_bursts_never_fill_the_send_queue)
{
	/* 20,000 packets in bursts of 1..32, received as they go: selective
	 * signalling must keep polling the send CQ. */
	unsigned sent = 0, got = 0;
	struct nic_tx tx[32];
	struct nic_rx rx[64];
	void *bufs[64];
	for (unsigned b = 0; sent < 20000; b++) {
		unsigned n = 1 + b % 32 < 20000 - sent ? 1 + b % 32 : 20000 - sent;
		for (unsigned i = 0; i < n; i++) {
			uint32_t *p = (uint32_t *)(void *)(mem + (size_t)((sent + i) % 256) * 4096);
			*p = sent + i;
			tx[i] = one(a_to_b, p, 4 + (sent + i) % 2000);
		}
		cr_assert_eq(nic_tx_burst(na, tx, n), n);
		sent += n;
		unsigned r;
		while ((r = nic_rx_burst(nb, rx, 64)) > 0) {
			for (unsigned i = 0; i < r; i++) {
				uint32_t v;
				memcpy(&v, rx[i].pkt, 4);
				cr_assert_eq(v, got, "in order, none lost");
				cr_assert_eq(rx[i].len, 4 + v % 2000);
				bufs[i] = rx[i].buf;
				got++;
			}
			nic_post_recvs(nb, bufs, r);
		}
	}
	for (int spins = 0; got < 20000 && spins < 100000; spins++) {
		unsigned r = nic_rx_burst(nb, rx, 64);
		for (unsigned i = 0; i < r; i++) {
			uint32_t v;
			memcpy(&v, rx[i].pkt, 4);
			cr_assert_eq(v, got++);
			bufs[i] = rx[i].buf;
		}
		nic_post_recvs(nb, bufs, r);
	}
	cr_assert_eq(got, 20000);
	nic_flush(na);
}

Test(softib_nic, receiver_that_does_not_return_buffers_drops_not_corrupts)
{
	/* 1024 receive buffers; send 1500 without giving any back. */
	unsigned held = 0;
	struct nic_rx *rx = calloc(2000, sizeof(*rx));
	for (unsigned i = 0; i < 1500; i++) {
		uint32_t *p = (uint32_t *)(void *)mem;
		*p = i;
		struct nic_tx t = one(a_to_b, p, 64);
		cr_assert_eq(nic_tx_burst(na, &t, 1), 1);
		held += nic_rx_burst(nb, rx + held, 2000 - held);
	}
	cr_assert_lt(held, 1500);
	cr_assert_geq(held, 1000);
	for (unsigned i = 0; i < held; i++) {
		uint32_t v;
		memcpy(&v, rx[i].pkt, 4);
		cr_assert_eq(v, i);
	}
	/* Given back, the ring works again. */
	for (unsigned i = 0; i < held; i++)
		nic_post_recvs(nb, &rx[i].buf, 1);
	struct nic_tx t = one(a_to_b, mem, 64);
	cr_assert_eq(nic_tx_burst(na, &t, 1), 1);
	cr_assert_eq(rx_n(nb, rx, 1), 1);
	nic_post_recvs(nb, &rx[0].buf, 1);
	free(rx);
}

Test(softib_nic, while_packets_are_big_fewer_receives_are_posted_but_what_credits_need)
{
	/* Receives complete in the order they were posted, so 1024 posted
	 * buffers taking 60 KB packets would sweep 60 MB, out of cache. Once
	 * the packets are big, and the buffers posted before are used up, nic_ib
	 * keeps fewer posted -- never fewer than one session's credits both
	 * ways. A receiver that stops taking packets then drops the rest. */
	const uint32_t big = 60000, stride = 65536, burst = 400;
	struct nic_rx rx[64];
	for (uint32_t i = 0; i < 1100; i++) {
		struct nic_tx t = one(a_to_b, mem, big);
		cr_assert_eq(nic_tx_burst(na, &t, 1), 1);
		cr_assert_eq(rx_n(nb, rx, 1), 1, "packet %u", i);
		cr_assert_eq(rx[0].len, big);
		nic_post_recvs(nb, &rx[0].buf, 1);
	}
	for (uint32_t i = 0; i < burst; i++) {
		uint8_t *p = mem + (size_t)(i % (MEM / stride)) * stride;
		memcpy(p, &i, sizeof(i));
		memset(p + sizeof(i), (int)(i & 0xff), big - sizeof(i));
		struct nic_tx t = one(a_to_b, p, big);
		cr_assert_eq(nic_tx_burst(na, &t, 1), 1);
	}
	struct nic_rx *held = calloc(burst, sizeof(*held));
	unsigned got = 0;
	for (int spins = 0; spins < 100000 && got < burst; spins++)
		got += nic_rx_burst(nb, held + got, burst - got);
	cr_assert_lt(got, burst, "fewer posted than the ring holds: some were dropped");
	cr_assert_geq(got, 2 * ferry_session_credits(&cfg, nb->max_pkt_size),
		      "a session's credits both ways fit");
	for (unsigned k = 0; k < got; k++) {
		uint32_t seq;
		memcpy(&seq, held[k].pkt, sizeof(seq));
		cr_assert_eq(seq, k, "the first ones, in order");
		cr_assert_eq(held[k].len, big);
		cr_assert_eq(((const uint8_t *)held[k].pkt)[big - 1], (uint8_t)(k & 0xff));
	}
	for (unsigned k = 0; k < got; k++)
		nic_post_recvs(nb, &held[k].buf, 1);
	free(held);
	struct nic_tx t = one(a_to_b, mem, big);
	cr_assert_eq(nic_tx_burst(na, &t, 1), 1);
	cr_assert_eq(rx_n(nb, rx, 1), 1, "given back, the ring works again");
	nic_post_recvs(nb, &rx[0].buf, 1);
}

Test(softib_nic, a_send_error_is_recovered_from)
{
	/* A bad lkey: the device stops the send queue (SQE); nic_ib brings the
	 * QP back to RTS and the next packet goes through. */
	struct nic_tx bad = {.peer = a_to_b, .nsge = 1, .sge = {{mem, 1000, mr.lkey ^ 0x7700u}}};
	cr_assert_eq(nic_tx_burst(na, &bad, 1), 1, "accepted, then lost");
	nic_flush(na);
	struct nic_rx rx;
	cr_assert_eq(nic_rx_burst(nb, &rx, 1), 0);
	struct nic_tx good = one(a_to_b, mem, 1000);
	cr_assert_eq(nic_tx_burst(na, &good, 1), 1);
	cr_assert_eq(rx_n(nb, &rx, 1), 1);
	cr_assert_eq(rx.len, 1000);
	nic_post_recvs(nb, &rx.buf, 1);
}

Test(softib_nic, notify_fd_sleeps_and_wakes)
{
	struct pollfd p = {.fd = nic_notify_fd(nb), .events = POLLIN};
	cr_assert_geq(p.fd, 0);
	cr_assert_eq(nic_arm_notify(nb), 0, "nothing waiting: may sleep");
	cr_assert_eq(poll(&p, 1, 0), 0);
	struct nic_tx t = one(a_to_b, mem, 100);
	cr_assert_eq(nic_tx_burst(na, &t, 1), 1);
	cr_assert_eq(poll(&p, 1, 5000), 1);
	/* Arming again drains the event and reports the packet. */
	cr_assert_eq(nic_arm_notify(nb), 1);
	cr_assert_eq(poll(&p, 1, 0), 0, "event consumed");
	struct nic_rx rx;
	cr_assert_eq(nic_rx_burst(nb, &rx, 1), 1);
	cr_assert_eq(rx.len, 100);
	nic_post_recvs(nb, &rx.buf, 1);
	/* A packet sent before arming is reported by the arm itself. */
	cr_assert_eq(nic_tx_burst(na, &t, 1), 1);
	cr_assert_eq(nic_arm_notify(nb), 1);
	cr_assert_eq(nic_rx_burst(nb, &rx, 1), 1);
	nic_post_recvs(nb, &rx.buf, 1);
}

/* Counts the reads of one fd (the completion channel's socket). */
static ssize_t (*real_recv)(int, void *, size_t, int);
static int counted_fd = -1;
static unsigned counted_reads;
static ssize_t counting_recv(int fd, void *buf, size_t len, int flags)
{
	if (fd == counted_fd)
		counted_reads++;
	return real_recv(fd, buf, len, flags);
}

Test(softib_nic, a_wake_costs_one_read_of_the_channel)
{
	struct pollfd p = {.fd = nic_notify_fd(nb), .events = POLLIN};
	cr_assert_eq(nic_arm_notify(nb), 0);
	struct nic_tx t = one(a_to_b, mem, 100);
	cr_assert_eq(nic_tx_burst(na, &t, 1), 1);
	cr_assert_eq(poll(&p, 1, 5000), 1);
	real_recv = sys()->recv;
	counted_fd = p.fd;
	sys_table.recv = counting_recv;
	int armed = nic_arm_notify(nb);
	sys_table.recv = real_recv;
	cr_assert_eq(armed, 1);
	/* One CQ on the channel, one event per arm: a second read could
	 * only fail. */
	cr_assert_eq(counted_reads, 1);
	cr_assert_eq(poll(&p, 1, 0), 0, "event consumed");
	struct nic_rx rx;
	cr_assert_eq(nic_rx_burst(nb, &rx, 1), 1);
	nic_post_recvs(nb, &rx.buf, 1);
}

Test(softib_nic, routes_of_another_kind_or_fabric_are_refused)
{
	struct nic_route r;
	nic_local_route(nb, &r);
	struct nic_peer *p;
	struct nic_route bad = r;
	bad.kind = FERRY_TRANSPORT_UDP;
	cr_assert_eq(nic_peer_create(na, &bad, &p), -EPROTOTYPE);
	bad = r;
	bad.len = 10;
	cr_assert_eq(nic_peer_create(na, &bad, &p), -EPROTOTYPE);
	bad = r;
	bad.data[15] ^= 0xff; /* a GID this fabric does not own */
	cr_assert_eq(nic_peer_create(na, &bad, &p), -EHOSTUNREACH);
	/* Peers to one port share one address handle and come and go freely. */
	struct nic_peer *p1, *p2;
	cr_assert_eq(nic_peer_create(na, &r, &p1), 0);
	cr_assert_eq(nic_peer_create(na, &r, &p2), 0);
	nic_peer_destroy(na, p1);
	struct nic_tx t = one(p2, mem, 10);
	cr_assert_eq(nic_tx_burst(na, &t, 1), 1);
	struct nic_rx rx;
	cr_assert_eq(rx_n(nb, &rx, 1), 1);
	nic_post_recvs(nb, &rx.buf, 1);
	nic_peer_destroy(na, p2);
}

Test(softib_nic, ferry_mtu_lowers_the_packet_size)
{
	struct ferry_config c2 = cfg;
	char e[128];
	cr_assert_eq(ferry_config_set(&c2, "FERRY_MTU", "1024", e, sizeof(e)), 0);
	int err;
	char msg[256];
	struct nic *n = nic_open(&c2, NULL, &err, msg, sizeof(msg));
	cr_assert_not_null(n, "%s", msg);
	cr_assert_eq(n->max_pkt_size, 1024);
	nic_close(n);
	/* Hardware-sized packets on softib, and a full ring of them. */
	cr_assert_eq(ferry_config_set(&c2, "FERRY_MTU", "4096", e, sizeof(e)), 0);
	n = nic_open(&c2, NULL, &err, msg, sizeof(msg));
	cr_assert_not_null(n, "%s", msg);
	cr_assert_eq(n->max_pkt_size, 4096);
	nic_close(n);
}

Test(softib_nic, nic_open_routes_by_transport)
{
	struct ferry_config c2 = cfg;
	int err = 0;
	char msg[256] = "";
	c2.transport = FERRY_TRANSPORT_TEST;
	cr_assert_null(nic_open(&c2, NULL, &err, msg, sizeof(msg)));
	cr_assert_eq(err, -EINVAL);
	cr_assert(strstr(msg, "nic_test_open"), "%s", msg);
	/* auto never picks softib: with no RDMA device here it is udp. */
	c2.transport = FERRY_TRANSPORT_AUTO;
	struct nic *n = nic_open(&c2, NULL, &err, msg, sizeof(msg));
	cr_assert_not_null(n, "%s", msg);
	cr_assert_str_neq(n->name, "softib");
	nic_close(n);
	/* ib asks libibverbs and says what is missing. */
	c2.transport = FERRY_TRANSPORT_IB;
	n = nic_open(&c2, NULL, &err, msg, sizeof(msg));
	if (n) {
		cr_assert_str_eq(n->name, "ib");
		nic_close(n);
	} else {
		cr_assert_lt(err, 0);
		cr_assert(strlen(msg) > 10, "a message that says what to change: %s", msg);
	}
}
