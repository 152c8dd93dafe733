/* The UDP nic's segmentation offload: equal packets leave in one send and
 * arrive split in place; a kernel that refuses it, at start or per send,
 * leaves plain datagrams that still carry every byte; coalesced datagrams
 * that cannot be split are dropped and counted. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/config.h"
#include "transport/nic.h"
#include "transport/stats.h"
#include "transport/sys.h"

#include "nic_udp_test_util.h"

enum { N = 40, LEN = 1400, LAST = 333 };
static uint8_t bufs[N][LEN], heads[N][32];

/* N packets of LEN bytes for p's peer, the last LAST bytes; all accepted. */
static void send_run(struct pair *p, struct nic_tx *tx)
{
	for (uint32_t i = 0; i < N; i++) {
		uint32_t len = i == N - 1 ? LAST : LEN;
		fill(bufs[i], len, i);
		make_tx(&tx[i], p->a_to_b, bufs[i], len, heads[i]);
	}
	cr_assert_eq(nic_tx_burst(p->a, tx, N), N);
}

/* Takes all N packets, max at a time, and checks every byte. */
static void receive_run(struct pair *p, struct nic_rx *rx, unsigned max)
{
	rx_all(p->b, rx, 0, N, max, true);
	for (uint32_t i = 0; i < N; i++)
		check(&rx[i], i == N - 1 ? LAST : LEN, i); /* loopback keeps order */
}

/* A pair at 1500 bytes with offload as gso says, and one run sent and
 * received through it, every byte checked. */
static void pair_run(struct pair *p, enum ferry_udp_gso_mode gso, struct nic_rx *rx)
{
	pair_open_gso(p, 1500, gso);
	struct nic_tx tx[N];
	send_run(p, tx);
	receive_run(p, rx, N);
}

static void post_all(struct pair *p, struct nic_rx *rx)
{
	for (uint32_t i = 0; i < N; i++)
		nic_post_recvs(p->b, &rx[i].buf, 1);
}

Test(nic_udp_gso, a_run_of_equal_packets_leaves_in_one_send_and_arrives_split, .timeout = 30)
{
	struct pair p;
	struct nic_rx rx[N];
	pair_run(&p, FERRY_UDP_GSO_ON, rx);
	cr_assert_eq(p.sa.udp_gso_sends, 1, "one send for the run");
	cr_assert_eq(p.sa.udp_gso_pkts, N);
	cr_assert_eq(p.sb.udp_gro_datagrams, 1, "one coalesced receive");
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(rx[i].buf, rx[0].buf, "one datagram, one buffer");
	post_all(&p, rx);
	cr_assert_eq(p.sb.drops, 0);
	cr_assert_eq(p.sa.udp_gso_unsupported + p.sb.udp_gso_unsupported, 0);
	pair_close(&p);
}

Test(nic_udp_gso, off_sends_each_packet_alone_with_the_same_bytes, .timeout = 30)
{
	struct pair p;
	struct nic_rx rx[N];
	pair_run(&p, FERRY_UDP_GSO_OFF, rx);
	cr_assert_eq(p.sa.udp_gso_sends, 0);
	cr_assert_eq(p.sb.udp_gro_datagrams, 0);
	cr_assert_eq(p.sa.udp_gso_unsupported, 0, "off is not a refusal");
	cr_assert_neq(rx[0].buf, rx[1].buf, "a buffer per datagram");
	post_all(&p, rx);
	pair_close(&p);
}

/* The coalesced buffer is split as the caller asks, a few at a time, and
 * is reused only when the last of its packets is back, whichever order. */
Test(nic_udp_gso, a_coalesced_buffer_is_split_on_demand_and_reused_last, .timeout = 30)
{
	struct pair p;
	pair_open_gso(&p, 1500, FERRY_UDP_GSO_ON);
	struct nic_tx tx[N];
	send_run(&p, tx);
	struct nic_rx rx[N];
	cr_assert_eq(rx_wait(p.b, rx, 3), 3, "as many as asked for");
	cr_assert_eq(nic_arm_notify(p.b), 1, "the rest is waiting: do not sleep");
	/* Every packet handed out so far goes back before the rest is split. */
	void *first = rx[0].buf;
	for (int i = 0; i < 3; i++)
		nic_post_recvs(p.b, &rx[i].buf, 1);
	rx_all(p.b, rx, 3, N, 7, false);
	cr_assert_eq(nic_arm_notify(p.b), 0);
	for (uint32_t i = 3; i < N; i++) {
		check(&rx[i], i == N - 1 ? LAST : LEN, i);
		cr_assert_eq(rx[i].buf, first, "not overwritten while split");
	}
	/* Back in reverse but one: however many datagrams follow, none lands
	 * in the buffer that one still holds. */
	for (uint32_t i = N; i-- > 4;)
		nic_post_recvs(p.b, &rx[i].buf, 1);
	for (int round = 0; round < 8; round++) {
		send_run(&p, tx);
		struct nic_rx again[N];
		receive_run(&p, again, N);
		for (uint32_t i = 0; i < N; i++) {
			cr_assert_neq(again[i].buf, first, "a buffer a packet still holds is reused");
			nic_post_recvs(p.b, &again[i].buf, 1);
		}
	}
	nic_post_recvs(p.b, &rx[3].buf, 1);
	pair_close(&p);
}

/* A receive slot that last took a plain datagram (the kernel then writes
 * back no control room) has room again for the segment size of the
 * coalesced datagram that lands in it next. */
Test(nic_udp_gso, a_slot_that_took_a_plain_datagram_takes_a_coalesced_one_next, .timeout = 30)
{
	struct pair p;
	pair_open_gso(&p, 1500, FERRY_UDP_GSO_ON);
	for (uint32_t round = 0; round < 3; round++) {
		uint8_t one[100], head[32];
		struct nic_tx t;
		fill(one, sizeof(one), 1000 + round);
		make_tx(&t, p.a_to_b, one, sizeof(one), head);
		cr_assert_eq(nic_tx_burst(p.a, &t, 1), 1);
		struct nic_rx r;
		cr_assert_eq(rx_wait(p.b, &r, 1), 1);
		check(&r, sizeof(one), 1000 + round);
		nic_post_recvs(p.b, &r.buf, 1);
		struct nic_tx tx[N];
		send_run(&p, tx);
		struct nic_rx rx[N];
		receive_run(&p, rx, N);
		post_all(&p, rx);
	}
	cr_assert_eq(p.sb.udp_gro_datagrams, 3, "each run arrives coalesced and split");
	cr_assert_eq(p.sb.drops, 0);
	pair_close(&p);
}

/* Stands in for libc's setsockopt: refuses the offload options, as a
 * kernel before 4.18 (UDP_SEGMENT) or 5.0 (UDP_GRO) does. */
static int (*real_setsockopt)(int, int, int, const void *, socklen_t);
static int setsockopt_without_offload(int fd, int level, int opt, const void *v, socklen_t len)
{
	if (level == IPPROTO_UDP && (opt == UDP_SEGMENT || opt == UDP_GRO)) {
		errno = ENOPROTOOPT;
		return -1;
	}
	return real_setsockopt(fd, level, opt, v, len);
}

Test(nic_udp_gso, a_kernel_without_offload_falls_back_and_says_so, .timeout = 30)
{
	real_setsockopt = sys()->setsockopt;
	sys_table.setsockopt = setsockopt_without_offload;
	struct pair p;
	pair_open_gso(&p, 1500, FERRY_UDP_GSO_AUTO);
	cr_assert_eq(p.sa.udp_gso_unsupported, 2, "both options refused, counted");
	cr_assert_eq(p.sb.udp_gso_unsupported, 2);
	struct nic_tx tx[N];
	send_run(&p, tx);
	struct nic_rx rx[N];
	receive_run(&p, rx, N);
	cr_assert_eq(p.sa.udp_gso_sends, 0, "plain datagrams");
	cr_assert_eq(p.sb.udp_gro_datagrams, 0);
	cr_assert_eq(nic_udp_tx_failures(p.a), 0);
	post_all(&p, rx);
	pair_close(&p);
}

/* Stand in for sendmsg and sendmmsg: a segmented send fails as the kernel
 * fails it for a route without checksum offload (EIO). */
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static int (*real_sendmmsg)(int, struct mmsghdr *, unsigned, int);
static unsigned segmented_refused;
static bool segmented(const struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR((struct msghdr *)m, c))
		if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_SEGMENT)
			return true;
	return false;
}
static ssize_t sendmsg_without_segmentation(int fd, const struct msghdr *m, int flags)
{
	if (segmented(m)) {
		segmented_refused++;
		errno = EIO;
		return -1;
	}
	return real_sendmsg(fd, m, flags);
}
static int sendmmsg_without_segmentation(int fd, struct mmsghdr *v, unsigned n, int flags)
{
	for (unsigned i = 0; i < n; i++) {
		if (!segmented(&v[i].msg_hdr))
			continue;
		if (i)
			return real_sendmmsg(fd, v, i, flags);
		segmented_refused++;
		errno = EIO;
		return -1;
	}
	return real_sendmmsg(fd, v, n, flags);
}

Test(nic_udp_gso, a_refused_segmented_send_goes_again_plainly, .timeout = 30)
{
	real_sendmsg = sys()->sendmsg;
	real_sendmmsg = sys()->sendmmsg;
	sys_table.sendmsg = sendmsg_without_segmentation;
	sys_table.sendmmsg = sendmmsg_without_segmentation;
	struct pair p;
	pair_open_gso(&p, 1500, FERRY_UDP_GSO_AUTO);
	struct nic_tx tx[N];
	send_run(&p, tx);
	cr_assert_eq(segmented_refused, 1, "tried once, then plain for that peer");
	cr_assert_eq(p.sa.udp_gso_refused, 1, "counted");
	cr_assert_eq(p.sa.udp_gso_sends, 0);
	cr_assert_eq(nic_udp_tx_failures(p.a), 0, "nothing lost");
	struct nic_rx rx[N];
	receive_run(&p, rx, N);
	post_all(&p, rx);
	send_run(&p, tx);
	cr_assert_eq(segmented_refused, 1, "the peer stays plain");
	receive_run(&p, rx, N);
	post_all(&p, rx);
	pair_close(&p);
}

/* A plain socket that segments its sends at seg bytes, aimed at p's b. */
static int segmenting_sender(const struct pair *p, int seg, struct sockaddr_in *to)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	cr_assert_geq(s, 0);
	cr_assert_eq(setsockopt(s, IPPROTO_UDP, UDP_SEGMENT, &seg, sizeof(seg)), 0, "%s",
		     strerror(errno));
	*to = loopback4;
	to->sin_port = htons(p->b_port);
	return s;
}

Test(nic_udp_gso, coalesced_datagrams_that_cannot_be_split_are_dropped_and_counted, .timeout = 30)
{
	struct pair p;
	pair_open_gso(&p, 1500, FERRY_UDP_GSO_ON);
	struct sockaddr_in to;
	/* Segments of 16 bytes: shorter than any packet header. */
	int s = segmenting_sender(&p, 16, &to);
	uint8_t junk[160];
	fill(junk, sizeof(junk), 1);
	cr_assert_eq(sendto(s, junk, sizeof(junk), 0, (struct sockaddr *)&to, sizeof(to)),
		     (ssize_t)sizeof(junk));
	close(s);
	/* Segments of 40 bytes: a malformed bundle, then a packet. */
	s = segmenting_sender(&p, 40, &to);
	uint8_t two[80];
	fill(two, sizeof(two), 2);
	memset(two, 0, 40);
	two[0] = 0xB7;
	two[1] = 1;
	two[2] = 9; /* nine packets in 40 bytes */
	cr_assert_eq(sendto(s, two, sizeof(two), 0, (struct sockaddr *)&to, sizeof(to)),
		     (ssize_t)sizeof(two));
	close(s);
	struct nic_rx rx[4];
	unsigned n = rx_wait(p.b, rx, 4);
	cr_assert_eq(n, 1, "only the well-formed segment is a packet");
	cr_assert_eq(rx[0].len, 40);
	cr_assert_eq(memcmp(rx[0].pkt, two + 40, 40), 0);
	nic_post_recvs(p.b, &rx[0].buf, 1);
	cr_assert_eq(p.sb.udp_gro_datagrams, 2);
	cr_assert_eq(p.sb.drop_gro, 1);
	cr_assert_eq(p.sb.drop_bundle, 1);
	cr_assert_eq(p.sb.drops, 2);
	pair_close(&p);
}
