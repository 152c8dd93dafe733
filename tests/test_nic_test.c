/* The in-process test nic: delivery, overflow drops, notify fd, two threads. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>

#include "transport/config.h"
#include "transport/nic_test.h"
#include "transport/stats.h"

struct pair {
	struct nic_test_fabric *fabric;
	struct nic *a, *b;
	struct nic_peer *a_to_b, *b_to_a;
	struct ferry_stats sa, sb;
};

static void pair_open(struct pair *p, uint32_t max_pkt, unsigned qlen)
{
	memset(p, 0, sizeof(*p));
	p->fabric = nic_test_fabric_create();
	cr_assert_not_null(p->fabric);
	p->a = nic_test_open(p->fabric, max_pkt, qlen, &p->sa);
	p->b = nic_test_open(p->fabric, max_pkt, qlen, &p->sb);
	cr_assert(p->a && p->b);
	struct nic_route ra, rb;
	nic_local_route(p->a, &ra);
	nic_local_route(p->b, &rb);
	cr_assert_eq(ra.kind, FERRY_TRANSPORT_TEST);
	cr_assert_neq(memcmp(&ra, &rb, sizeof(ra)), 0, "each nic has its own address");
	nic_route_fixup(p->a, &rb, NULL, 0);
	cr_assert_eq(nic_peer_create(p->a, &rb, &p->a_to_b), 0);
	cr_assert_eq(nic_peer_create(p->b, &ra, &p->b_to_a), 0);
}

static void pair_close(struct pair *p)
{
	nic_peer_destroy(p->a, p->a_to_b);
	nic_peer_destroy(p->b, p->b_to_a);
	nic_close(p->a);
	nic_close(p->b);
	nic_test_fabric_destroy(p->fabric);
}

static unsigned send_one(struct nic *n, struct nic_peer *to, const void *hdr, uint32_t hlen,
			 const void *data, uint32_t dlen)
{
	struct nic_tx tx = {.peer = to, .nsge = dlen ? 2 : 1};
	tx.sge[0] = (struct nic_sge){.addr = hdr, .len = hlen};
	tx.sge[1] = (struct nic_sge){.addr = data, .len = dlen};
	return nic_tx_burst(n, &tx, 1);
}

Test(nic_test, delivers_concatenated_sges_in_order, .timeout = 30)
{
	struct pair p;
	pair_open(&p, 1024, 16);
	char hdr[8], data[100];
	for (int i = 0; i < 5; i++) {
		memset(hdr, 'h' + i, sizeof(hdr));
		memset(data, 'A' + i, sizeof(data));
		cr_assert_eq(send_one(p.a, p.a_to_b, hdr, sizeof(hdr), data, (uint32_t)(10 * i)), 1);
	}
	struct nic_rx rx[8];
	cr_assert_eq(nic_rx_burst(p.a, rx, 8), 0, "nothing loops back to the sender");
	unsigned n = nic_rx_burst(p.b, rx, 8);
	cr_assert_eq(n, 5);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(rx[i].len, 8 + 10 * i);
		cr_assert_eq(rx[i].pkt[0], 'h' + i);
		cr_assert_eq(rx[i].pkt[7], 'h' + i);
		for (unsigned j = 8; j < rx[i].len; j++)
			cr_assert_eq(rx[i].pkt[j], 'A' + i);
		cr_assert_eq((uintptr_t)rx[i].pkt % 8, 0);
	}
	void *bufs[8];
	for (unsigned i = 0; i < n; i++)
		bufs[n - 1 - i] = rx[i].buf;
	nic_post_recvs(p.b, bufs, n);
	cr_assert_eq(p.sb.drops, 0);
	pair_close(&p);
}

Test(nic_test, full_queue_drops_and_counts, .timeout = 30)
{
	struct pair p;
	pair_open(&p, 256, 4);
	uint8_t pkt[32] = {1};
	for (int i = 0; i < 6; i++)
		cr_assert_eq(send_one(p.a, p.a_to_b, pkt, sizeof(pkt), NULL, 0), 1);
	cr_assert_eq(nic_test_overflows(p.b), 2);
	cr_assert_eq(p.sb.drop_nomem, 2);
	cr_assert_eq(p.sb.drops, 2);

	/* Buffers held by the owner are not free either, as on a NIC. */
	struct nic_rx rx[8];
	cr_assert_eq(nic_rx_burst(p.b, rx, 3), 3);
	cr_assert_eq(send_one(p.a, p.a_to_b, pkt, sizeof(pkt), NULL, 0), 1);
	cr_assert_eq(nic_test_overflows(p.b), 3);
	void *bufs[3] = {rx[1].buf, rx[0].buf, rx[2].buf};
	nic_post_recvs(p.b, bufs, 3);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(send_one(p.a, p.a_to_b, pkt, sizeof(pkt), NULL, 0), 1);
	cr_assert_eq(nic_test_overflows(p.b), 3);
	cr_assert_eq(nic_rx_burst(p.b, rx, 8), 4);
	for (int i = 0; i < 4; i++)
		bufs[0] = rx[i].buf, nic_post_recvs(p.b, bufs, 1);
	pair_close(&p);
}

Test(nic_test, oversize_and_closed_peer_are_lost, .timeout = 30)
{
	struct pair p;
	pair_open(&p, 64, 4);
	uint8_t big[65] = {0};
	cr_assert_eq(send_one(p.a, p.a_to_b, big, 40, big, 25), 1);
	cr_assert_eq(p.sa.drop_size, 1);
	struct nic_rx rx[2];
	cr_assert_eq(nic_rx_burst(p.b, rx, 2), 0);

	struct nic *c = nic_test_open(p.fabric, 64, 4, NULL);
	cr_assert_not_null(c);
	struct nic_route rc;
	struct nic_peer *a_to_c;
	nic_local_route(c, &rc);
	cr_assert_eq(nic_peer_create(p.a, &rc, &a_to_c), 0);
	nic_close(c);
	cr_assert_eq(send_one(p.a, a_to_c, big, 8, NULL, 0), 1, "accepted, then lost");
	nic_peer_destroy(p.a, a_to_c);
	pair_close(&p);
}

Test(nic_test, foreign_routes_are_refused, .timeout = 30)
{
	struct pair p;
	pair_open(&p, 64, 4);
	struct nic_test_fabric *other = nic_test_fabric_create();
	struct nic *o = nic_test_open(other, 64, 4, NULL);
	struct nic_route ro;
	struct nic_peer *peer;
	nic_local_route(o, &ro);
	cr_assert_eq(nic_peer_create(p.a, &ro, &peer), -EHOSTUNREACH);
	ro.kind = FERRY_TRANSPORT_UDP;
	cr_assert_eq(nic_peer_create(p.a, &ro, &peer), -EAFNOSUPPORT);
	nic_close(o);
	nic_test_fabric_destroy(other);
	pair_close(&p);
}

Test(nic_test, route_format_names_fabric_and_address, .timeout = 30)
{
	struct pair p;
	pair_open(&p, 64, 4);
	struct nic_route r;
	nic_local_route(p.b, &r);
	char buf[64];
	nic_route_format(p.b, &r, buf, sizeof(buf));
	cr_assert_eq(strncmp(buf, "test:", 5), 0, "%s", buf);
	cr_assert_not_null(strstr(buf, ".2"), "%s", buf);
	pair_close(&p);
}

static int readable(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	return poll(&pfd, 1, 0);
}

Test(nic_test, notify_fd_becomes_readable, .timeout = 30)
{
	struct pair p;
	pair_open(&p, 64, 8);
	int fd = nic_notify_fd(p.b);
	cr_assert_geq(fd, 0);
	cr_assert_eq(nic_arm_notify(p.b), 0);
	cr_assert_eq(readable(fd), 0);
	uint8_t pkt[16] = {0};
	send_one(p.a, p.a_to_b, pkt, sizeof(pkt), NULL, 0);
	cr_assert_eq(readable(fd), 1);
	cr_assert_eq(nic_arm_notify(p.b), 1, "a packet is waiting: do not sleep");
	cr_assert_eq(readable(fd), 0, "arm drained the event");
	struct nic_rx rx[2];
	cr_assert_eq(nic_rx_burst(p.b, rx, 2), 1);
	nic_post_recvs(p.b, &rx[0].buf, 1);
	cr_assert_eq(nic_arm_notify(p.b), 0);
	send_one(p.a, p.a_to_b, pkt, sizeof(pkt), NULL, 0);
	cr_assert_eq(readable(fd), 1, "a new arrival after arming wakes the sleeper");
	pair_close(&p);
}

/* Each thread owns one nic; they bounce a counter back and forth, sleeping
 * on the notify fd when nothing is waiting. */
struct bouncer {
	struct nic *nic;
	struct nic_peer *peer;
	bool starts;
	unsigned rounds;
	unsigned got;
};

static void *bounce(void *arg)
{
	struct bouncer *b = arg;
	uint32_t next = 0;
	if (b->starts)
		send_one(b->nic, b->peer, &next, sizeof(next), NULL, 0);
	while (b->got < b->rounds) {
		struct nic_rx rx[4];
		unsigned n = nic_rx_burst(b->nic, rx, 4);
		if (n == 0) {
			if (nic_arm_notify(b->nic) == 0) {
				struct pollfd pfd = {.fd = nic_notify_fd(b->nic), .events = POLLIN};
				poll(&pfd, 1, 1000);
			}
			continue;
		}
		for (unsigned i = 0; i < n; i++) {
			uint32_t v;
			memcpy(&v, rx[i].pkt, sizeof(v));
			if (v != 2 * b->got + (b->starts ? 1 : 0))
				return "out of order";
			b->got++;
			v++;
			send_one(b->nic, b->peer, &v, sizeof(v), NULL, 0);
			nic_post_recvs(b->nic, &rx[i].buf, 1);
		}
	}
	return NULL;
}

Test(nic_test, two_threads_bounce_packets, .timeout = 30)
{
	struct pair p;
	pair_open(&p, 64, 4);
	struct bouncer x = {.nic = p.a, .peer = p.a_to_b, .starts = true, .rounds = 2000};
	struct bouncer y = {.nic = p.b, .peer = p.b_to_a, .starts = false, .rounds = 2000};
	pthread_t tx, ty;
	pthread_create(&tx, NULL, bounce, &x);
	pthread_create(&ty, NULL, bounce, &y);
	void *rx_err, *ry_err;
	pthread_join(tx, &rx_err);
	pthread_join(ty, &ry_err);
	cr_assert_null(rx_err, "%s", (char *)rx_err);
	cr_assert_null(ry_err, "%s", (char *)ry_err);
	cr_assert_eq(x.got, 2000);
	cr_assert_eq(y.got, 2000);
	cr_assert_eq(p.sa.drops + p.sb.drops, 0);
	pair_close(&p);
}
