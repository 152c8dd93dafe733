/* The UDP nic's per-peer sockets and the application's descriptors: never a
 * number the application would get next, never more than a small share. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/config.h"
#include "transport/nic.h"
#include "transport/nic_udp.h"
#include "transport/stats.h"

#include "nic_udp_test_util.h"

#define PEERS 200

/* How many more descriptors the application could open right now. */
static int room_left(void)
{
	static int fds[1 << 16];
	int n = 0;
	while (n < (int)(sizeof(fds) / sizeof(fds[0]))) {
		int fd = open("/dev/null", O_RDONLY);
		if (fd < 0) {
			cr_assert_eq(errno, EMFILE);
			break;
		}
		fds[n++] = fd;
	}
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return n;
}

static int highest_fd(void)
{
	DIR *d = opendir("/proc/self/fd");
	cr_assert_not_null(d);
	int top = -1;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.' && atoi(e->d_name) > top)
			top = atoi(e->d_name);
	closedir(d);
	return top;
}

/* Sets the soft limit to lim (the hard one stays). */
static void set_nofile(rlim_t lim)
{
	struct rlimit rl;
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max < lim)
		cr_skip_test("RLIMIT_NOFILE's hard limit %llu is below %llu",
			     (unsigned long long)rl.rlim_max, (unsigned long long)lim);
	rl.rlim_cur = lim;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

static void send_and_take(struct nic *a, struct nic_peer *to, struct nic *b, uint8_t tag)
{
	uint8_t buf[40];
	memset(buf, tag, sizeof(buf));
	struct nic_tx tx = {.peer = to, .nsge = 1, .sge = {{.addr = buf, .len = sizeof(buf)}}};
	cr_assert_eq(nic_tx_burst(a, &tx, 1), 1);
	struct nic_rx rx;
	cr_assert_eq(rx_wait(b, &rx, 1), 1);
	cr_assert_eq(rx.len, sizeof(buf));
	cr_assert_eq(rx.pkt[0], tag);
	nic_post_recvs(b, &rx.buf, 1);
}

/* Descriptors this process has open. */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	cr_assert_not_null(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own */
}

/* Enough datagrams for a loopback peer to get its own socket (or to find
 * the share used up). */
static void use_peer(struct nic *a, struct nic_peer *to, struct nic *b)
{
	for (unsigned i = 0; i < NIC_UDP_PEER_LAZY; i++)
		send_and_take(a, to, b, (uint8_t)(1 + i % 100));
}

/* Two nics, and the route from a to b. */
struct fds_pair {
	struct ferry_config cfg;
	struct ferry_stats sa, sb;
	struct nic *a, *b;
	struct nic_route r;
};

static void fds_open(struct fds_pair *p)
{
	memset(p, 0, sizeof(*p));
	ferry_config_defaults(&p->cfg);
	p->a = open_nic(&p->cfg, &p->sa);
	p->b = open_nic(&p->cfg, &p->sb);
	nic_local_route(p->b, &p->r);
	nic_route_fixup(p->a, &p->r, (const struct sockaddr *)&loopback4, sizeof(loopback4));
}

static void fds_close(struct fds_pair *p)
{
	nic_close(p->a);
	nic_close(p->b);
}

/* One peer, made without taking the number the application gets next, and
 * reached. */
static void one_peer_keeps_the_numbers(struct fds_pair *p, uint8_t tag)
{
	int low = lowest_free_fd();
	struct nic_peer *to;
	cr_assert_eq(nic_peer_create(p->a, &p->r, &to), 0);
	use_peer(p->a, to, p->b);
	cr_assert_eq(lowest_free_fd(), low);
	send_and_take(p->a, to, p->b, tag);
	nic_peer_destroy(p->a, to);
}

/*
 * A server with many client processes holds one peer per process. Their
 * sockets live above the numbers the application uses, and are few: with
 * more peers than that, the later ones send from the nic's socket, so the
 * application neither sees other numbers nor runs out of descriptors
 * sooner than it would without ferry.
 */
Test(nic_udp_fds, many_peers_leave_the_application_its_descriptors, .timeout = 60)
{
	set_nofile(256);
	struct fds_pair p;
	fds_open(&p);
	int low = lowest_free_fd();
	int room = room_left();
	static struct nic_peer *peers[PEERS];
	for (int i = 0; i < PEERS; i++) {
		cr_assert_eq(nic_peer_create(p.a, &p.r, &peers[i]), 0);
		use_peer(p.a, peers[i], p.b);
		cr_assert_eq(lowest_free_fd(), low, "peer %d took a low number", i);
	}
	/* A few descriptors may go to the peers, never most of them. */
	int after = room_left();
	cr_assert_geq(after, room - room / 8, "room for %d descriptors, %d before", after, room);
	/* Every peer is reached, with its own socket or the nic's. */
	send_and_take(p.a, peers[0], p.b, 1);
	send_and_take(p.a, peers[PEERS - 1], p.b, 2);
	for (int i = 0; i < PEERS; i++)
		nic_peer_destroy(p.a, peers[i]);
	cr_assert_eq(room_left(), room);
	fds_close(&p);
}

/* Too low a limit to hide anything: no peer takes a number of its own. */
Test(nic_udp_fds, a_small_limit_changes_no_numbers, .timeout = 60)
{
	set_nofile(64);
	struct fds_pair p;
	fds_open(&p);
	one_peer_keeps_the_numbers(&p, 3);
	fds_close(&p);
}

/*
 * With a huge limit the socket still sits at a moderate number: the kernel's
 * table grows to the highest number in use (and a fork copies it), so a
 * socket at half of a million-descriptor limit would cost megabytes.
 */
Test(nic_udp_fds, a_huge_limit_keeps_the_table_small, .timeout = 60)
{
	set_nofile(1 << 20);
	struct fds_pair p;
	fds_open(&p);
	struct nic_peer *to;
	cr_assert_eq(nic_peer_create(p.a, &p.r, &to), 0);
	use_peer(p.a, to, p.b);
	cr_assert_lt(highest_fd(), 65536 + 4096);
	nic_peer_destroy(p.a, to);
	one_peer_keeps_the_numbers(&p, 4);
	fds_close(&p);
}

/*
 * A peer on loopback sends from the nic's socket until it has sent
 * NIC_UDP_PEER_LAZY datagrams, then from a socket of its own: the peer of a
 * process that lives for one connection never makes one.
 */
Test(nic_udp_fds, a_loopback_peer_gets_a_socket_once_it_is_used, .timeout = 60)
{
	struct fds_pair p;
	fds_open(&p);
	int before = open_fds();
	struct nic_peer *to;
	cr_assert_eq(nic_peer_create(p.a, &p.r, &to), 0);
	cr_assert_eq(open_fds(), before, "a socket before any datagram");
	for (unsigned i = 0; i + 1 < NIC_UDP_PEER_LAZY; i++)
		send_and_take(p.a, to, p.b, (uint8_t)(1 + i % 100));
	cr_assert_eq(open_fds(), before, "a socket before the %u-th datagram", NIC_UDP_PEER_LAZY);
	send_and_take(p.a, to, p.b, 0xee);
	cr_assert_eq(open_fds(), before + 1, "no socket of its own after %u datagrams",
		     NIC_UDP_PEER_LAZY);
	send_and_take(p.a, to, p.b, 0xef);
	nic_peer_destroy(p.a, to);
	cr_assert_eq(open_fds(), before);
	fds_close(&p);
}
