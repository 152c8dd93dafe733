/* The kernel UDP nic over loopback: bytes, bursts, buffer reuse, routes, foreign datagrams. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/config.h"
#include "transport/log.h"
#include "transport/nic.h"
#include "transport/nic_udp.h"
#include "transport/stats.h"
#include "transport/sys.h"

#include "nic_udp_test_util.h"

/*
 * The nic reaches libc through transport/sys.h's table, so a test stands in
 * for a libc function by writing its slot. This socket() refuses IPv6, as
 * on a kernel booted with ipv6.disable=1, so the IPv4-only path runs here
 * too (criterion runs each test in a process of its own, so the slot need
 * not be put back).
 */
static int (*real_socket)(int, int, int);
static int socket_without_ipv6(int domain, int type, int protocol)
{
	if (domain == AF_INET6) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	return real_socket(domain, type, protocol);
}

Test(nic_udp, defaults_to_max_udp_payload, .timeout = 60)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	struct ferry_stats st = {0};
	struct nic *n = open_nic(&cfg, &st);
	cr_assert_eq(n->max_pkt_size, 65507);
	cr_assert_geq(nic_notify_fd(n), 0);
	cr_assert_eq(nic_arm_notify(n), 1, "a sleep armed before any look");
	char mem[64];
	struct nic_mr mr = {.lkey = 99};
	cr_assert_eq(nic_reg_mem(n, mem, sizeof(mem), &mr), 0);
	cr_assert_eq(mr.lkey, 0);
	nic_dereg_mem(n, &mr);
	nic_close(n);
	cfg.mtu = 1500;
	n = open_nic(&cfg, &st);
	cr_assert_eq(n->max_pkt_size, 1500);
	nic_close(n);
}

Test(nic_udp, every_size_arrives_intact_from_two_sges, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	const uint32_t max = p.a->max_pkt_size;
	const uint32_t sizes[] = {1, 2, 31, 32, 33, 100, 1024, 1472, 1473, 4096, 8999, 9000,
				  32768, 65000, max - 1, max};
	uint8_t *buf = malloc(max);
	uint8_t head[32];
	for (uint32_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		fill(buf, sizes[s], s);
		struct nic_tx tx;
		make_tx(&tx, p.a_to_b, buf, sizes[s], head);
		cr_assert_eq(nic_tx_burst(p.a, &tx, 1), 1, "size %u", sizes[s]);
		nic_flush(p.a);
		memset(buf, 0, sizes[s]); /* flush returned: the nic holds no reference */
		struct nic_rx rx;
		cr_assert_eq(rx_wait(p.b, &rx, 1), 1, "size %u never arrived", sizes[s]);
		check(&rx, sizes[s], s);
		nic_post_recvs(p.b, &rx.buf, 1);
	}
	free(buf);
	cr_assert_eq(nic_udp_tx_failures(p.a), 0);
	cr_assert_eq(p.sb.drops, 0);
	pair_close(&p);
}

Test(nic_udp, burst_of_64_in_one_call, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	enum { N = 64, LEN = 700 };
	static uint8_t bufs[N][LEN], heads[N][32];
	struct nic_tx tx[N];
	for (uint32_t i = 0; i < N; i++) {
		fill(bufs[i], LEN - i, i);
		make_tx(&tx[i], p.a_to_b, bufs[i], LEN - i, heads[i]);
	}
	cr_assert_eq(nic_tx_burst(p.a, tx, N), N);
	struct nic_rx rx[N];
	rx_all(p.b, rx, 0, N, N, true);
	for (uint32_t i = 0; i < N; i++) {
		check(&rx[i], LEN - i, i); /* loopback keeps order */
		nic_post_recvs(p.b, &rx[i].buf, 1);
	}
	pair_close(&p);
}

/* n datagrams from a to b, of sizes 9000 + i (apart: n datagrams, not one
 * segmented send), their contents fill(i); returns once b's socket has them. */
static void send_apart(struct pair *p, uint32_t n)
{
	static uint8_t bufs[4][9100], head[32];
	cr_assert_leq(n, 4);
	for (uint32_t i = 0; i < n; i++) {
		fill(bufs[i], 9000 + i, i);
		struct nic_tx tx;
		make_tx(&tx, p->a_to_b, bufs[i], 9000 + i, head);
		cr_assert_eq(nic_tx_burst(p->a, &tx, 1), 1);
		nic_flush(p->a);
	}
	struct pollfd pf = {.fd = nic_notify_fd(p->b), .events = POLLIN};
	cr_assert_eq(poll(&pf, 1, 5000), 1);
}

/* Checks n received in send_apart's order, rounds of `sent` each, and
 * gives their buffers back. */
static void check_apart(struct pair *p, struct nic_rx *rx, uint32_t n, uint32_t sent)
{
	for (uint32_t i = 0; i < n; i++) {
		check(&rx[i], 9000 + i % sent, i % sent);
		nic_post_recvs(p->b, &rx[i].buf, 1);
	}
}

/* nic_rx_drained says whether the last receive left the socket empty: a
 * sleep on the notify fd may then stand for a look (preload's epoll skips
 * one). Only a receive that took fewer than it asked for can tell, and a
 * wake-up taken from the fd since that receive began unsays it. */
Test(nic_udp, a_receive_says_when_it_emptied_the_socket, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	struct nic_rx rx[64];
	cr_assert_eq(nic_rx_burst(p.b, rx, 64), 0);
	cr_expect(nic_rx_drained(p.b), "an empty receive did not say so");
	nic_rx_notified(p.b);
	cr_expect_not(nic_rx_drained(p.b), "drained after a wake-up taken since the look");
	cr_assert_eq(nic_rx_burst(p.b, rx, 64), 0);
	cr_expect(nic_rx_drained(p.b), "a look after the wake-up did not say drained");
	send_apart(&p, 4);
	/* After a quiet spell one datagram is taken alone: more may wait. */
	cr_assert_eq(nic_rx_burst(p.b, rx, 64), 1);
	cr_expect_not(nic_rx_drained(p.b), "a lone receive claimed the socket empty");
	/* A receive that got all it asked for cannot tell either. */
	cr_assert_eq(nic_rx_burst(p.b, rx + 1, 2), 2);
	cr_expect_not(nic_rx_drained(p.b), "a full receive claimed the socket empty");
	cr_assert_eq(nic_rx_burst(p.b, rx + 3, 61), 1);
	cr_expect(nic_rx_drained(p.b), "a receive that took fewer than asked did not say so");
	check_apart(&p, rx, 4, 4);
	pair_close(&p);
}

/* The edge that announced them is gone once a wake-up is taken: the look
 * after it takes everything queued, not one datagram alone. */
Test(nic_udp, a_look_after_a_wake_up_takes_all_that_is_queued, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	struct nic_rx rx[64];
	cr_assert_eq(nic_rx_burst(p.b, rx, 64), 0); /* a quiet spell: next comes alone */
	send_apart(&p, 2);
	nic_rx_notified(p.b);
	cr_expect_eq(nic_rx_burst(p.b, rx, 64), 2, "a look after a wake-up left a datagram queued");
	cr_expect(nic_rx_drained(p.b), "a look that took fewer than asked did not say drained");
	/* Without a wake-up taken, the first after a quiet spell comes alone
	 * (a lone receive is the cheaper system call). */
	cr_assert_eq(nic_rx_burst(p.b, rx + 2, 62), 0);
	send_apart(&p, 2);
	cr_assert_eq(nic_rx_burst(p.b, rx + 2, 62), 1);
	cr_assert_eq(nic_rx_burst(p.b, rx + 3, 61), 1);
	check_apart(&p, rx, 4, 2);
	pair_close(&p);
}

/* Sleepers watch the socket edge triggered: a datagram left queued behind
 * a look would wake nobody, so arming says to look first. */
Test(nic_udp, arming_asks_for_a_look_while_datagrams_may_be_queued, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	struct nic_rx rx[64];
	cr_expect_eq(nic_arm_notify(p.b), 1, "armed for a sleep before any look");
	cr_assert_eq(nic_rx_burst(p.b, rx, 64), 0);
	cr_expect_eq(nic_arm_notify(p.b), 0, "an empty look did not let the caller sleep");
	nic_rx_notified(p.b);
	cr_expect_eq(nic_arm_notify(p.b), 1, "armed for a sleep with a wake-up taken since the look");
	cr_assert_eq(nic_rx_burst(p.b, rx, 64), 0);
	send_apart(&p, 2);
	cr_assert_eq(nic_rx_burst(p.b, rx, 64), 1); /* alone, after a quiet spell */
	cr_expect_eq(nic_arm_notify(p.b), 1, "a sleep armed with a datagram left queued");
	cr_assert_eq(nic_rx_burst(p.b, rx + 1, 63), 1);
	cr_expect_eq(nic_arm_notify(p.b), 0, "the socket is empty, yet arming asks for a look");
	check_apart(&p, rx, 2, 2);
	pair_close(&p);
}

Test(nic_udp, returned_buffers_are_reused_in_any_order, .timeout = 60)
{
	struct pair p;
	/* Two packets of LEN do not fit in 2048 bytes: one datagram each, and
	 * without segmentation offload one buffer each (test_nic_udp_gso has
	 * the coalesced case). */
	pair_open_gso(&p, 2048, FERRY_UDP_GSO_OFF);
	enum { SENT = 400, LEN = 1100 };
	static uint8_t bufs[SENT][LEN], heads[SENT][32];
	static struct nic_tx tx[SENT];
	for (uint32_t i = 0; i < SENT; i++) {
		fill(bufs[i], LEN, i);
		make_tx(&tx[i], p.a_to_b, bufs[i], LEN, heads[i]);
	}
	cr_assert_eq(nic_tx_burst(p.a, tx, SENT), SENT);

	/* Take packets without returning any until the nic runs out of buffers. */
	static struct nic_rx held[SENT];
	unsigned n = rx_wait(p.b, held, SENT);
	cr_assert_gt(n, 0);
	for (unsigned got; (got = nic_rx_burst(p.b, held + n, SENT - n)) > 0;)
		n += got;
	cr_assert_lt(n, SENT, "the nic owns fewer buffers than packets sent");
	struct pollfd pfd = {.fd = nic_notify_fd(p.b), .events = POLLIN};
	cr_assert_eq(poll(&pfd, 1, 0), 1, "the rest waits in the socket");
	struct nic_rx none;
	cr_assert_eq(nic_rx_burst(p.b, &none, 1), 0, "no buffer: nothing is overwritten");
	cr_assert_eq(nic_arm_notify(p.b), 0, "no buffer to look with, yet arming asks for a look");
	for (unsigned i = 0; i < n; i++)
		check(&held[i], LEN, i);

	/* Give back every third buffer, last first. */
	void *back[SENT];
	unsigned nback = 0;
	for (unsigned i = n; i-- > 0;)
		if (i % 3 == 0)
			back[nback++] = held[i].buf;
	nic_post_recvs(p.b, back, nback);
	struct nic_rx more[SENT];
	unsigned m = 0;
	for (unsigned got; (got = nic_rx_burst(p.b, more + m, SENT - m)) > 0;)
		m += got;
	cr_assert_eq(m, nback < SENT - n ? nback : SENT - n);
	for (unsigned i = 0; i < m; i++) {
		check(&more[i], LEN, n + i);
		bool reused = false;
		for (unsigned j = 0; j < nback; j++)
			reused |= more[i].buf == back[j];
		cr_assert(reused, "packet %u landed in a buffer that was not returned", n + i);
	}
	/* The buffers still held were not touched. */
	for (unsigned i = 0; i < n; i++)
		if (i % 3)
			check(&held[i], LEN, i);
	for (unsigned i = 0; i < n; i++)
		if (i % 3)
			nic_post_recvs(p.b, &held[i].buf, 1);
	for (unsigned i = 0; i < m; i++)
		nic_post_recvs(p.b, &more[i].buf, 1);
	pair_close(&p);
}

/* A plain UDP socket, and in *to the address of p's nic b. */
static int plain_sender(const struct pair *p, struct sockaddr_in *to)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	cr_assert_geq(s, 0);
	*to = loopback4;
	to->sin_port = htons(p->b_port);
	return s;
}

/* A plain UDP socket on loopback, to see the datagrams a nic sends. */
static int raw_peer(struct nic *from, struct nic_peer **to)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	cr_assert_geq(s, 0);
	struct sockaddr_in a = loopback4;
	a.sin_port = 0;
	cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	socklen_t al = sizeof(a);
	cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &al), 0);
	struct nic_route r;
	nic_local_route(from, &r);
	nic_route_fixup(from, &r, (const struct sockaddr *)&loopback4, sizeof(loopback4));
	uint16_t port = a.sin_port;
	memcpy(r.data + 1, &port, 2);
	cr_assert_eq(nic_peer_create(from, &r, to), 0);
	return s;
}

static ssize_t raw_recv(int s, uint8_t *buf, size_t cap)
{
	struct pollfd pfd = {.fd = s, .events = POLLIN};
	poll(&pfd, 1, 2000);
	return recv(s, buf, cap, MSG_DONTWAIT);
}

Test(nic_udp, small_packets_to_one_peer_share_a_datagram, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	struct nic_peer *raw_to;
	int raw = raw_peer(p.a, &raw_to);
	enum { N = 10 };
	static uint8_t bufs[N][200], heads[N][32];
	struct nic_tx tx[N + 2];
	for (uint32_t i = 0; i < N; i++) {
		fill(bufs[i], 33 + 17 * i, i);
		make_tx(&tx[i], raw_to, bufs[i], 33 + 17 * i, heads[i]);
	}
	/* Then one for the nic peer, and one more for the raw socket. */
	static uint8_t lone[2][40];
	fill(lone[0], 40, 50);
	fill(lone[1], 40, 51);
	tx[N] = (struct nic_tx){.peer = p.a_to_b, .nsge = 1, .sge = {{.addr = lone[0], .len = 40}}};
	tx[N + 1] = (struct nic_tx){.peer = raw_to, .nsge = 1, .sge = {{.addr = lone[1], .len = 40}}};
	cr_assert_eq(nic_tx_burst(p.a, tx, N + 2), N + 2);

	static uint8_t d[65536];
	ssize_t len = raw_recv(raw, d, sizeof(d));
	cr_assert_gt(len, 0);
	cr_assert_eq(d[0], 0xB7, "a bundle");
	cr_assert_eq(d[2] | d[3] << 8, N, "of all %d consecutive packets", N);
	size_t off = 8;
	for (uint32_t i = 0; i < N; i++) {
		uint32_t plen = d[off] | d[off + 1] << 8 | (uint32_t)d[off + 2] << 16;
		cr_assert_eq(plen, 33 + 17 * i);
		off += 8;
		cr_assert_eq(off % 8, 0, "packet %u is 8-byte aligned", i);
		struct nic_rx view = {.pkt = d + off, .len = plen};
		check(&view, plen, i);
		off += (plen + 7) & ~7u;
	}
	cr_assert_eq(off, (size_t)len);
	len = raw_recv(raw, d, sizeof(d));
	cr_assert_eq(len, 40, "the packet after another peer's goes alone, unframed");
	struct nic_rx view = {.pkt = d, .len = 40};
	check(&view, 40, 51);
	struct nic_rx rx;
	cr_assert_eq(rx_wait(p.b, &rx, 1), 1);
	check(&rx, 40, 50);
	nic_post_recvs(p.b, &rx.buf, 1);
	nic_peer_destroy(p.a, raw_to);
	close(raw);
	pair_close(&p);
}

Test(nic_udp, a_bundle_arrives_as_its_packets_however_few_are_asked_for, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	enum { N = 40 };
	static uint8_t bufs[N][300], heads[N][32];
	struct nic_tx tx[N];
	for (uint32_t i = 0; i < N; i++) {
		fill(bufs[i], 1 + 7 * i, i);
		make_tx(&tx[i], p.a_to_b, bufs[i], 1 + 7 * i, heads[i]);
	}
	cr_assert_eq(nic_tx_burst(p.a, tx, N), N);
	struct nic_rx rx[N];
	unsigned got = rx_wait(p.b, rx, 3);
	cr_assert_eq(got, 3, "as many as asked for");
	cr_assert_eq(nic_arm_notify(p.b), 1, "the rest is waiting: do not sleep");
	/* Each buffer goes back when its last packet does. */
	nic_post_recvs(p.b, &rx[0].buf, 1);
	rx_all(p.b, rx, got, N, 5, false);
	cr_assert_eq(nic_arm_notify(p.b), 0);
	for (uint32_t i = 0; i < N; i++) {
		check(&rx[i], 1 + 7 * i, i);
		cr_assert_eq((uintptr_t)rx[i].pkt % 8, 0);
		cr_assert_eq(rx[i].buf, rx[0].buf, "one datagram, one buffer");
	}
	for (uint32_t i = 1; i < N; i++)
		nic_post_recvs(p.b, &rx[i].buf, 1);
	cr_assert_eq(p.sb.drops, 0);
	pair_close(&p);
}

Test(nic_udp, malformed_bundles_are_dropped_and_counted, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 1500);
	struct sockaddr_in to;
	int s = plain_sender(&p, &to);
	/* count, lengths and padding that do not add up to the datagram */
	static const uint8_t bad[][40] = {
		{0xB7, 1, 2, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0},
		{0xB7, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0},
		{0xB7, 2, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
		{0xB7, 1, 2, 0, 0, 0, 0, 0, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
		{0xB7, 1, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
		 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0},
		{0xB7},
	};
	static const size_t bad_len[] = {24, 24, 40, 24, 39, 1};
	for (size_t i = 0; i < sizeof(bad_len) / sizeof(bad_len[0]); i++)
		cr_assert_eq(sendto(s, bad[i], bad_len[i], 0, (struct sockaddr *)&to, sizeof(to)),
			     (ssize_t)bad_len[i]);
	/* and a good one, built by hand: two packets of 1 and 9 bytes */
	uint8_t good[48] = {0xB7, 1, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'a'};
	good[24] = 9;
	memcpy(good + 32, "bcdefghij", 9);
	cr_assert_eq(sendto(s, good, 48, 0, (struct sockaddr *)&to, sizeof(to)), 48);
	struct nic_rx rx[2];
	unsigned n = rx_wait(p.b, rx, 2);
	cr_assert_eq(n, 2);
	cr_assert_eq(rx[0].len, 1);
	cr_assert_eq(rx[0].pkt[0], 'a');
	cr_assert_eq(rx[1].len, 9);
	cr_assert_eq(memcmp(rx[1].pkt, "bcdefghij", 9), 0);
	nic_post_recvs(p.b, &rx[0].buf, 1);
	nic_post_recvs(p.b, &rx[1].buf, 1);
	cr_assert_eq(p.sb.drop_bundle, 6);
	cr_assert_eq(p.sb.drops, 6);
	close(s);
	pair_close(&p);
}

/* Where a nic's socket is bound, as "host:port". */
static void bound_at(const struct nic *n, char *buf, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	cr_assert_eq(getsockname(nic_notify_fd(n), (struct sockaddr *)&ss, &len), 0);
	char host[INET6_ADDRSTRLEN];
	const void *a = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
						 : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
	inet_ntop(ss.ss_family, a, host, sizeof(host));
	snprintf(buf, cap, "%s:%u", host,
		 ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						: ((struct sockaddr_in *)&ss)->sin_port));
}

static void carries(struct nic *from, struct nic_peer *peer, struct nic *to, uint32_t seq)
{
	uint8_t pkt[64];
	fill(pkt, sizeof(pkt), seq);
	struct nic_tx tx = {.peer = peer, .nsge = 1, .sge = {{.addr = pkt, .len = sizeof(pkt)}}};
	cr_assert_eq(nic_tx_burst(from, &tx, 1), 1);
	nic_flush(from);
	struct nic_rx rx;
	cr_assert_eq(rx_wait(to, &rx, 1), 1, "packet %u lost", seq);
	check(&rx, sizeof(pkt), seq);
	nic_post_recvs(to, &rx.buf, 1);
}

/* A nic starts on loopback, and tells its peers so outright; widened, it
 * listens on the wildcard at the same port and number, so the route a peer
 * already holds still reaches it, and a new peer gets the wildcard route. */
Test(nic_udp, a_nic_starts_on_loopback_and_widens_in_place, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	char at[96], want[96], got[96];
	bound_at(p.b, at, sizeof(at));
	snprintf(want, sizeof(want), "127.0.0.1:%u", p.b_port);
	cr_assert_str_eq(at, want);
	struct nic_route r;
	nic_local_route(p.b, &r);
	nic_route_format(p.b, &r, got, sizeof(got));
	snprintf(want, sizeof(want), "udp:[127.0.0.1]:%u", p.b_port);
	cr_assert_str_eq(got, want);
	carries(p.a, p.a_to_b, p.b, 1);
	/* A peer seen at ::1 is reached at 127.0.0.1, where this nic can send. */
	struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	struct nic *c = open_nic(&p.cfg, &p.sa);
	cr_assert_eq(nic_widen(c), 0);
	nic_local_route(c, &r);
	uint16_t c_port = route_port(c, &r);
	nic_route_fixup(p.a, &r, (const struct sockaddr *)&lo6, sizeof(lo6));
	nic_route_format(p.a, &r, got, sizeof(got));
	snprintf(want, sizeof(want), "udp:[127.0.0.1]:%u", c_port);
	cr_assert_str_eq(got, want);
	struct nic_peer *a_to_c;
	cr_assert_eq(nic_peer_create(p.a, &r, &a_to_c), 0);
	carries(p.a, a_to_c, c, 9);
	nic_peer_destroy(p.a, a_to_c);
	nic_close(c);

	int fd = nic_notify_fd(p.b);
	cr_assert_eq(nic_widen(p.b), 0);
	cr_assert_eq(nic_notify_fd(p.b), fd);
	bound_at(p.b, at, sizeof(at));
	snprintf(want, sizeof(want), ":%u", p.b_port);
	bool any = strncmp(at, ":::", 3) == 0 || strncmp(at, "0.0.0.0:", 8) == 0;
	cr_assert(any && strcmp(at + strlen(at) - strlen(want), want) == 0, "bound at %s", at);
	carries(p.a, p.a_to_b, p.b, 2);
	nic_local_route(p.b, &r);
	nic_route_format(p.b, &r, got, sizeof(got));
	cr_assert(strstr(got, "[::]") || strstr(got, "[0.0.0.0]"), "%s", got);
	cr_assert_eq(nic_widen(p.b), 0, "a second widening changes nothing");
	carries(p.a, p.a_to_b, p.b, 3);
	pair_close(&p);
}

Test(nic_udp, route_fixup_fills_only_a_wildcard_host, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	cr_assert_eq(nic_widen(p.a), 0);
	cr_assert_eq(nic_widen(p.b), 0);
	struct nic_route r;
	char want[96], got[96];
	nic_local_route(p.b, &r);
	nic_route_format(p.b, &r, got, sizeof(got));
	bool v6 = strncmp(got, "udp:[::]:", 9) == 0;
	cr_assert(v6 || strncmp(got, "udp:[0.0.0.0]:", 14) == 0, "%s", got);

	struct nic_peer *peer;
	cr_assert_eq(nic_peer_create(p.a, &r, &peer), -EDESTADDRREQ, "no host yet");
	nic_route_fixup(p.a, &r, NULL, 0);
	cr_assert_eq(nic_peer_create(p.a, &r, &peer), -EDESTADDRREQ);

	nic_route_fixup(p.a, &r, (const struct sockaddr *)&loopback4, sizeof(loopback4));
	snprintf(want, sizeof(want), v6 ? "udp:[::ffff:127.0.0.1]:%u" : "udp:[127.0.0.1]:%u",
		 p.b_port);
	nic_route_format(p.a, &r, got, sizeof(got));
	cr_assert_str_eq(got, want);

	/* A host is kept, whatever the management channel saw later. */
	struct sockaddr_in other = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x0a010203)};
	nic_route_fixup(p.a, &r, (const struct sockaddr *)&other, sizeof(other));
	nic_route_format(p.a, &r, got, sizeof(got));
	cr_assert_str_eq(got, want);

	if (v6) {
		struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
		nic_local_route(p.b, &r);
		nic_route_fixup(p.a, &r, (const struct sockaddr *)&lo6, sizeof(lo6));
		snprintf(want, sizeof(want), "udp:[::1]:%u", p.b_port);
		nic_route_format(p.a, &r, got, sizeof(got));
		cr_assert_str_eq(got, want);
		/* And the v6 route works end to end. */
		cr_assert_eq(nic_peer_create(p.a, &r, &peer), 0);
		uint8_t pkt[40];
		fill(pkt, sizeof(pkt), 7);
		struct nic_tx tx = {.peer = peer, .nsge = 1, .sge = {{.addr = pkt, .len = 40}}};
		cr_assert_eq(nic_tx_burst(p.a, &tx, 1), 1);
		struct nic_rx rx;
		cr_assert_eq(rx_wait(p.b, &rx, 1), 1);
		check(&rx, 40, 7);
		nic_post_recvs(p.b, &rx.buf, 1);
		nic_peer_destroy(p.a, peer);
	}
	pair_close(&p);
}

Test(nic_udp, route_format_refuses_foreign_routes, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	struct nic_route r;
	char got[96];
	nic_local_route(p.b, &r);
	r.kind = FERRY_TRANSPORT_TEST;
	nic_route_format(p.b, &r, got, sizeof(got));
	cr_assert_str_eq(got, "udp:?");
	struct nic_peer *peer;
	cr_assert_eq(nic_peer_create(p.a, &r, &peer), -EAFNOSUPPORT);
	nic_local_route(p.b, &r);
	r.len = 3;
	nic_route_format(p.b, &r, got, sizeof(got));
	cr_assert_str_eq(got, "udp:?");
	char tiny[8];
	nic_local_route(p.b, &r);
	nic_route_format(p.b, &r, tiny, sizeof(tiny));
	cr_assert_eq(strlen(tiny), sizeof(tiny) - 1, "truncated, terminated");
	pair_close(&p);
}

Test(nic_udp, any_datagram_arrives_as_a_packet, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 1500);
	struct sockaddr_in to;
	int s = plain_sender(&p, &to);
	cr_assert_eq(sendto(s, "hello", 5, 0, (struct sockaddr *)&to, sizeof(to)), 5);
	struct nic_rx rx;
	cr_assert_eq(rx_wait(p.b, &rx, 1), 1);
	cr_assert_eq(rx.len, 5);
	cr_assert_eq(memcmp(rx.pkt, "hello", 5), 0);
	nic_post_recvs(p.b, &rx.buf, 1);

	/* Larger than the nic's packets: dropped and counted, not cut short. */
	static uint8_t big[2000];
	cr_assert_eq(sendto(s, big, sizeof(big), 0, (struct sockaddr *)&to, sizeof(to)),
		     (ssize_t)sizeof(big));
	cr_assert_eq(sendto(s, "x", 1, 0, (struct sockaddr *)&to, sizeof(to)), 1);
	cr_assert_eq(rx_wait(p.b, &rx, 1), 1);
	cr_assert_eq(rx.len, 1);
	cr_assert_eq(p.sb.drop_size, 1);
	cr_assert_eq(p.sb.drops, 1);
	nic_post_recvs(p.b, &rx.buf, 1);

	/* Again after a quiet spell, when the nic takes one datagram at a
	 * time: a lone oversized one is dropped and counted there too. */
	cr_assert_eq(nic_rx_burst(p.b, &rx, 1), 0);
	cr_assert_eq(sendto(s, big, sizeof(big), 0, (struct sockaddr *)&to, sizeof(to)),
		     (ssize_t)sizeof(big));
	struct pollfd pfd = {.fd = nic_notify_fd(p.b), .events = POLLIN};
	cr_assert_eq(poll(&pfd, 1, 5000), 1);
	cr_assert_eq(nic_rx_burst(p.b, &rx, 1), 0);
	cr_assert_eq(p.sb.drop_size, 2);
	cr_assert_eq(sendto(s, "yz", 2, 0, (struct sockaddr *)&to, sizeof(to)), 2);
	cr_assert_eq(rx_wait(p.b, &rx, 1), 1);
	cr_assert_eq(rx.len, 2);
	cr_assert_eq(memcmp(rx.pkt, "yz", 2), 0);
	cr_assert_eq(p.sb.drops, 2);
	nic_post_recvs(p.b, &rx.buf, 1);
	close(s);
	pair_close(&p);
}

Test(nic_udp, hard_send_error_drops_one_packet_not_the_burst, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	static uint8_t big[65508], small[3][16];
	struct nic_tx tx[3];
	for (int i = 0; i < 3; i++) {
		fill(small[i], 16, (uint32_t)i);
		tx[i] = (struct nic_tx){.peer = p.a_to_b, .nsge = 1, .sge = {{.addr = small[i], .len = 16}}};
	}
	/* One byte over the IPv4 UDP limit: the kernel says EMSGSIZE. */
	tx[1].nsge = 2;
	tx[1].sge[1] = (struct nic_sge){.addr = big, .len = sizeof(big) - 16};
	cr_assert_eq(nic_tx_burst(p.a, tx, 3), 3);
	cr_assert_eq(nic_udp_tx_failures(p.a), 1);
	struct nic_rx rx[3];
	unsigned n = rx_wait(p.b, rx, 3);
	if (n < 2)
		n += rx_wait(p.b, rx + n, 3 - n);
	cr_assert_eq(n, 2);
	check(&rx[0], 16, 0);
	check(&rx[1], 16, 2);
	nic_post_recvs(p.b, &rx[0].buf, 1);
	nic_post_recvs(p.b, &rx[1].buf, 1);
	pair_close(&p);
}

Test(nic_udp, a_peer_whose_port_is_gone_costs_only_its_packets, .timeout = 60)
{
	struct pair p;
	pair_open(&p, 0);
	struct ferry_stats sc = {0};
	struct nic *c = open_nic(&p.cfg, &sc);
	struct nic_route r;
	nic_local_route(c, &r);
	nic_route_fixup(p.a, &r, (const struct sockaddr *)&loopback4, sizeof(loopback4));
	struct nic_peer *to_c;
	cr_assert_eq(nic_peer_create(p.a, &r, &to_c), 0);
	/* Used enough to send from a connected socket of its own, which
	 * hears of the port's end (NIC_UDP_PEER_LAZY). */
	uint8_t warm[24];
	fill(warm, sizeof(warm), 9);
	struct nic_tx w = {.peer = to_c, .nsge = 1, .sge = {{.addr = warm, .len = sizeof(warm)}}};
	for (unsigned i = 0; i < NIC_UDP_PEER_LAZY; i++)
		cr_assert_eq(nic_tx_burst(p.a, &w, 1), 1);
	nic_close(c);

	uint8_t buf[3][24];
	for (uint32_t round = 0; round < 3; round++) {
		fill(buf[round], sizeof(buf[round]), round);
		struct nic_tx tx[2] = {
			{.peer = to_c, .nsge = 1, .sge = {{.addr = buf[round], .len = 24}}},
			{.peer = p.a_to_b, .nsge = 1, .sge = {{.addr = buf[round], .len = 24}}},
		};
		cr_assert_eq(nic_tx_burst(p.a, tx, 2), 2, "lost as on the wire, not refused");
		struct nic_rx rx;
		cr_assert_eq(rx_wait(p.b, &rx, 1), 1, "round %u", round);
		check(&rx, 24, round);
		nic_post_recvs(p.b, &rx.buf, 1);
	}
	/* Its refusals are counted as failed sends. */
	cr_assert_geq(nic_udp_tx_failures(p.a), 1);
	nic_peer_destroy(p.a, to_c);
	pair_close(&p);
}

static char log_path[64];

static void log_to_file(void)
{
	snprintf(log_path, sizeof(log_path), "/tmp/ferry-peer-gone.%d", (int)getpid());
	ferry_log_init(FERRY_LOG_WARN, log_path);
}

static bool log_has(const char *what)
{
	FILE *f = fopen(log_path, "r");
	if (!f)
		return false;
	char line[512];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

static void log_done(void)
{
	ferry_log_init(FERRY_LOG_WARN, NULL);
	unlink(log_path);
}

/* A peer whose port has gone is counted, not warned about (the peer's death
 * is mgmt's to report), and does not use up the one warning a real send
 * failure gets; the nic says it is gone, and of no live peer. */
Test(nic_udp, a_peer_whose_port_is_gone_is_counted_quietly, .timeout = 60)
{
	log_to_file();
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	struct ferry_stats sa = {0}, sc = {0};
	struct nic *a = open_nic(&cfg, &sa);
	struct nic *c = open_nic(&cfg, &sc);
	struct nic_peer *to_c = peer_to(a, c);
	uint8_t buf[24];
	memset(buf, 5, sizeof(buf));
	struct nic_tx tx = {.peer = to_c, .nsge = 1, .sge = {{.addr = buf, .len = sizeof(buf)}}};
	/* A connected socket of its own first: only that one hears that the
	 * port is gone (NIC_UDP_PEER_LAZY). */
	for (unsigned i = 0; i < NIC_UDP_PEER_LAZY; i++)
		cr_assert_eq(nic_tx_burst(a, &tx, 1), 1);
	nic_close(c);

	/* The first datagram draws the ICMP answer, a later send reports it. */
	for (int i = 0; i < 100 && nic_udp_tx_failures(a) == 0; i++) {
		cr_assert_eq(nic_tx_burst(a, &tx, 1), 1);
	}
	cr_assert_geq(nic_udp_tx_failures(a), 1, "the refusal is counted");
	cr_assert_not(log_has("Connection refused"), "a dead peer is no send failure");
	cr_assert(nic_peer_gone(a, to_c), "a peer whose port refused is not said to be gone");

	/* A real failure, to a live peer, still gets its warning. */
	struct nic *b = open_nic(&cfg, &sc);
	struct nic_peer *to_b = peer_to(a, b);
	static uint8_t big[65508];
	/* One byte over the IPv4 UDP limit: the kernel says EMSGSIZE. */
	struct nic_tx over = {.peer = to_b, .nsge = 1, .sge = {{.addr = big, .len = sizeof(big)}}};
	uint64_t before = nic_udp_tx_failures(a);
	cr_assert_eq(nic_tx_burst(a, &over, 1), 1);
	cr_assert_eq(nic_udp_tx_failures(a), before + 1);
	cr_assert(log_has("Message too long"), "the first real failure is warned about");
	cr_assert_not(nic_peer_gone(a, to_b), "a live peer a send failed to is said to be gone");

	nic_peer_destroy(a, to_b);
	nic_peer_destroy(a, to_c);
	nic_close(b);
	nic_close(a);
	log_done();
}

Test(nic_udp, without_ipv6_falls_back_to_ipv4, .timeout = 60)
{
	struct nic *v6 = NULL;
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	struct ferry_stats st = {0};
	v6 = open_nic(&cfg, &st);
	cr_assert_eq(nic_widen(v6), 0);
	real_socket = sys()->socket;
	sys_table.socket = socket_without_ipv6;
	struct pair p;
	pair_open(&p, 0);
	cr_assert_eq(nic_widen(p.a), 0);
	cr_assert_eq(nic_widen(p.b), 0);
	struct nic_route r;
	char want[96], got[96];
	nic_local_route(p.b, &r);
	nic_route_format(p.b, &r, got, sizeof(got));
	snprintf(want, sizeof(want), "udp:[0.0.0.0]:%u", p.b_port);
	cr_assert_str_eq(got, want);

	/* A v4-mapped address seen by a dual-stack management socket becomes v4. */
	struct sockaddr_in6 mapped = {.sin6_family = AF_INET6};
	inet_pton(AF_INET6, "::ffff:127.0.0.1", &mapped.sin6_addr);
	nic_route_fixup(p.a, &r, (const struct sockaddr *)&mapped, sizeof(mapped));
	nic_route_format(p.a, &r, got, sizeof(got));
	snprintf(want, sizeof(want), "udp:[127.0.0.1]:%u", p.b_port);
	cr_assert_str_eq(got, want);

	/* A pure IPv6 peer cannot be reached from here. */
	struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	struct nic_peer *peer;
	nic_local_route(p.b, &r);
	nic_route_fixup(p.a, &r, (const struct sockaddr *)&lo6, sizeof(lo6));
	cr_assert_eq(nic_peer_create(p.a, &r, &peer), -EAFNOSUPPORT);

	/* v4 -> v4, and v4 -> a dual-stack nic, both carry packets. */
	struct nic *dst[2] = {p.b, v6};
	for (int i = 0; i < 2; i++) {
		nic_local_route(dst[i], &r);
		nic_route_fixup(p.a, &r, (const struct sockaddr *)&loopback4, sizeof(loopback4));
		cr_assert_eq(nic_peer_create(p.a, &r, &peer), 0);
		uint8_t pkt[48];
		fill(pkt, sizeof(pkt), (uint32_t)i);
		struct nic_tx tx = {.peer = peer, .nsge = 1, .sge = {{.addr = pkt, .len = 48}}};
		cr_assert_eq(nic_tx_burst(p.a, &tx, 1), 1);
		struct nic_rx rx;
		cr_assert_eq(rx_wait(dst[i], &rx, 1), 1);
		check(&rx, 48, (uint32_t)i);
		nic_post_recvs(dst[i], &rx.buf, 1);
		nic_peer_destroy(p.a, peer);
	}
	pair_close(&p);
	nic_close(v6);
}
