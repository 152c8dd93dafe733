/* Placeholder pools: blank sockets come back as they went, bound ones keep
 * their ports reserved and distinct, and a shortage of descriptors empties
 * the pools. */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "preload/phpool.h"

TestSuite(phpool, .timeout = 20);

static struct sockaddr_in loopback(uint32_t host)
{
	return (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(host)};
}

static uint16_t port_of(const struct sockaddr_storage *ss)
{
	return ntohs(((const struct sockaddr_in *)(const void *)ss)->sin_port);
}

Test(phpool, blank_sockets_are_reused)
{
	int h = phpool_take(AF_INET);
	cr_assert_geq(h, 0);
	int type = 0;
	socklen_t tl = sizeof(type);
	cr_assert_eq(getsockopt(h, SOL_SOCKET, SO_TYPE, &type, &tl), 0);
	cr_assert_eq(type, SOCK_STREAM);
	cr_assert_eq(fcntl(h, F_GETFD), FD_CLOEXEC, "never inherited across exec");
	phpool_give(AF_INET, h);
	cr_assert_eq(phpool_take(AF_INET), h, "the same socket, not a new one");
	int h6 = phpool_take(AF_INET6);
	if (h6 >= 0) { /* hosts without IPv6 refuse the socket itself */
		int dom = 0;
		socklen_t dl = sizeof(dom);
		cr_assert_eq(getsockopt(h6, SOL_SOCKET, SO_DOMAIN, &dom, &dl), 0);
		cr_assert_eq(dom, AF_INET6, "each family has its own pool");
	}
}

Test(phpool, bound_ports_are_distinct_and_reserved)
{
	struct sockaddr_in src = loopback(INADDR_LOOPBACK);
	struct sockaddr_storage l1, l2, l3;
	socklen_t n1, n2, n3;
	int a = phpool_take_bound(AF_INET, (struct sockaddr *)&src, sizeof(src), &l1, &n1);
	int b = phpool_take_bound(AF_INET, (struct sockaddr *)&src, sizeof(src), &l2, &n2);
	cr_assert(a >= 0 && b >= 0);
	cr_assert_neq(port_of(&l1), 0);
	cr_assert_neq(port_of(&l1), port_of(&l2));
	/* Nobody else gets the port while ferry holds it, pooled or not. */
	phpool_give_bound(a, &l1, n1);
	int t = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in same = loopback(INADDR_LOOPBACK);
	same.sin_port = htons(port_of(&l1));
	cr_assert_eq(bind(t, (struct sockaddr *)&same, sizeof(same)), -1);
	cr_assert_eq(errno, EADDRINUSE);
	close(t);
	int c = phpool_take_bound(AF_INET, (struct sockaddr *)&src, sizeof(src), &l3, &n3);
	cr_assert_eq(c, a, "the pooled socket, bound as it was");
	cr_assert_eq(port_of(&l3), port_of(&l1));
	cr_assert_eq(n3, n1);
	phpool_give_bound(b, &l2, n2);
	phpool_give_bound(c, &l3, n3);
}

Test(phpool, bound_sockets_are_kept_per_address)
{
	struct sockaddr_in one = loopback(INADDR_LOOPBACK), two = loopback(INADDR_LOOPBACK + 1);
	struct sockaddr_storage l1, l2;
	socklen_t n1, n2;
	int a = phpool_take_bound(AF_INET, (struct sockaddr *)&one, sizeof(one), &l1, &n1);
	cr_assert_geq(a, 0);
	phpool_give_bound(a, &l1, n1);
	int b = phpool_take_bound(AF_INET, (struct sockaddr *)&two, sizeof(two), &l2, &n2);
	cr_assert_geq(b, 0);
	cr_assert_neq(b, a, "a socket bound to another address is no use");
	struct sockaddr_in *in = (void *)&l2;
	cr_assert_eq(in->sin_addr.s_addr, htonl(INADDR_LOOPBACK + 1));
	cr_assert_eq(phpool_take_bound(AF_INET6, (struct sockaddr *)&one, sizeof(one), &l1, &n1),
		     -EAFNOSUPPORT, "a v6 socket binds v6 (mapped) addresses only");
}

/* Lowers the soft RLIMIT_NOFILE to n; returns the limits to restore. */
static struct rlimit files_limit_to(rlim_t n)
{
	struct rlimit rl, low;
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	low = rl;
	low.rlim_cur = n;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	return rl;
}

Test(phpool, short_descriptors_empty_the_pools)
{
	struct rlimit rl = files_limit_to(256);
	int h = phpool_take(AF_INET);
	cr_assert_geq(h, 0);
	phpool_give(AF_INET, h);
	/* Hidden descriptors sit from 128 up: the application's numbers
	 * reclaim them before they get there, at 128 - 128 / 8. */
	cr_assert_not(phpool_pressure(111), "below the hidden descriptors' reach");
	cr_assert(phpool_pressure(112), "close to the hidden descriptors: reclaim");
	cr_assert_not(phpool_pressure(113), "said once, not on every call");
	phpool_drain();
	cr_assert_eq(fcntl(h, F_GETFD), -1, "drained: the pooled socket is closed");
	cr_assert_eq(phpool_take(AF_INET), -EMFILE, "nothing handed out meanwhile");
	int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	phpool_give(AF_INET, t);
	cr_assert_eq(fcntl(t, F_GETFD), -1, "nor kept");
	cr_assert_not(phpool_pressure(60), "above half the mark: still short");
	cr_assert_eq(phpool_take(AF_INET), -EMFILE);
	cr_assert_not(phpool_pressure(20), "under half the mark again");
	h = phpool_take(AF_INET);
	cr_assert_geq(h, 0, "pooling is back");
	setrlimit(RLIMIT_NOFILE, &rl);
}

Test(phpool, bound_sockets_come_back_oldest_first)
{
	struct sockaddr_in src = loopback(INADDR_LOOPBACK);
	struct sockaddr_storage l[3], got;
	socklen_t n[3], gn;
	int h[3];
	for (int i = 0; i < 3; i++) {
		h[i] = phpool_take_bound(AF_INET, (struct sockaddr *)&src, sizeof(src), &l[i], &n[i]);
		cr_assert_geq(h[i], 0);
	}
	for (int i = 0; i < 3; i++)
		phpool_give_bound(h[i], &l[i], n[i]);
	for (int i = 0; i < 3; i++) {
		int t = phpool_take_bound(AF_INET, (struct sockaddr *)&src, sizeof(src), &got, &gn);
		cr_assert_eq(t, h[i], "given back %d-th, taken %d-th", i, i);
		cr_assert_eq(port_of(&got), port_of(&l[i]));
	}
}

Test(phpool, hidden_descriptors_sit_at_half_the_limit_and_pools_keep_a_share)
{
	struct rlimit rl = files_limit_to(256);
	cr_assert_not(phpool_pressure(3));
	enum { N = 20 };
	int h[N];
	for (int i = 0; i < N; i++) {
		h[i] = phpool_take(AF_INET);
		cr_assert_geq(h[i], 128, "hidden descriptor %d at %d", i, h[i]);
		cr_assert_eq(fcntl(h[i], F_GETFD), FD_CLOEXEC);
	}
	for (int i = 0; i < N; i++)
		phpool_give(AF_INET, h[i]);
	int kept = 0;
	for (int i = 0; i < N; i++)
		kept += fcntl(h[i], F_GETFD) != -1;
	cr_assert_leq(kept, 256 / 32, "%d kept of the application's 256", kept);
	cr_assert_gt(kept, 0, "but some are");
	phpool_drain();
	setrlimit(RLIMIT_NOFILE, &rl);
}

Test(phpool, what_was_handed_out_before_a_fork_is_never_kept)
{
	int h = phpool_take(AF_INET);
	cr_assert_geq(h, 0);
	phpool_fork_prepare();
	phpool_fork_parent(); /* as around a fork: h is the child's too */
	phpool_give(AF_INET, h);
	cr_assert_eq(fcntl(h, F_GETFD), -1, "closed, not pooled");
	struct sockaddr_in src = loopback(INADDR_LOOPBACK);
	struct sockaddr_storage l;
	socklen_t n;
	int b = phpool_take_bound(AF_INET, (struct sockaddr *)&src, sizeof(src), &l, &n);
	cr_assert_geq(b, 0);
	phpool_fork_prepare();
	phpool_fork_parent();
	phpool_give_bound(b, &l, n);
	cr_assert_eq(fcntl(b, F_GETFD), -1, "closed, not pooled");
	int c = phpool_take(AF_INET);
	phpool_give(AF_INET, c);
	cr_assert_eq(phpool_take(AF_INET), c, "one handed out since is kept as before");
}

/* The slots of this process's descriptor table (FDSize in /proc). */
static long fd_slots(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	cr_assert_not_null(f);
	char line[256];
	long n = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "FDSize: %ld", &n) == 1)
			break;
	fclose(f);
	return n;
}

/* The table is grown past where hidden descriptors go (half the limit)
 * before ferry's threads start: grown later, when threads share it, the
 * kernel waits for an RCU grace period first, and a process's first
 * connection waited with it. Nothing is left open. */
Test(phpool, the_table_is_grown_past_the_hidden_floor_at_once)
{
	struct rlimit rl = {4096, 4096};
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	long before = fd_slots();
	cr_assert_lt(before, 2048, "the table is already %ld slots", before);
	DIR *d = opendir("/proc/self/fd");
	cr_assert_not_null(d);
	int open_before = 0;
	while (readdir(d))
		open_before++;
	phpool_grow_table();
	rewinddir(d);
	int open_after = 0;
	while (readdir(d))
		open_after++;
	closedir(d);
	cr_expect_geq(fd_slots(), 2048, "the table has %ld slots", fd_slots());
	cr_expect_eq(open_after, open_before, "descriptors left open");
}
