/* The interposer in a real process: lazy start from FERRY_*, refusal of a
 * bad value, pass-through when disabled, a stream carried end to end,
 * fork (the child's copy errs, the parent's stream lives on) and the
 * counters dumped on demand. Each test is its own process (criterion). */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/options.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/listener.h"
#include "preload_proc_util.h"

/* One test at a time: with two workers in parallel, criterion's runner
 * itself leaks 48 bytes (LeakSanitizer, inside libcriterion), which fails
 * the sanitizer build. */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	criterion_options.jobs = 1;
}

static int count_threads(void)
{
	return proc_entries("/proc/self/task");
}

/* A listener on loopback and a connected, accepted pair. */
static void stream_pair(int *cli, int *srv, int *lis)
{
	struct sockaddr_in a;
	*lis = loopback_listener(&a);
	*cli = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(*cli, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s",
		     strerror(errno));
	*srv = accept(*lis, NULL, NULL);
	cr_assert_geq(*srv, 0, "accept: %s", strerror(errno));
}

Test(start, a_bad_value_is_refused_by_name_and_ferry_stays_off, .timeout = 30)
{
	setenv("FERRY_SPIN_US", "lots", 1);
	char path[] = "/tmp/ferry-test-log.XXXXXX";
	int logfd = mkstemp(path);
	cr_assert_geq(logfd, 0);
	int saved = dup(2);
	dup2(logfd, 2);
	int threads = count_threads();
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	dup2(saved, 2);
	cr_assert_geq(fd, 0, "the socket still works, from the kernel");
	cr_assert_eq(ferry_state(), FERRY_OFF);
	cr_assert_not(fdtable_maybe(&fdtab, fd), "pass-through: not ferry's");
	cr_assert_eq(count_threads(), threads, "no threads started");
	char buf[1024] = "";
	ssize_t n = pread(logfd, buf, sizeof(buf) - 1, 0);
	cr_assert_gt(n, 0);
	cr_assert_not_null(strstr(buf, "FERRY_SPIN_US"), "the message names the variable: %s", buf);
	close(fd);
	close(logfd);
	unlink(path);
}

Test(start, disabled_means_pass_through, .timeout = 30)
{
	setenv("FERRY_ENABLE", "0", 1);
	int threads = count_threads();
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ferry_state(), FERRY_OFF);
	cr_assert_not(fdtable_maybe(&fdtab, fd));
	cr_assert_eq(count_threads(), threads);
	close(fd);
}

Test(start, when_ferry_cannot_start_connections_are_counted_as_fallbacks, .timeout = 30)
{
	/* No verbs device on a test host: the ib datapath cannot open. */
	setenv("FERRY_TRANSPORT", "ib", 1);
	setenv("FERRY_LOG", "error", 1);
	setenv("FERRY_DEVICE", "ferry-test-no-such-device", 1);
	int lis = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(lis, 0);
	cr_assert_eq(ferry_state(), FERRY_OFF);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	cr_assert_eq(bind(lis, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(lis, 4), 0);
	socklen_t al = sizeof(a);
	getsockname(lis, (struct sockaddr *)&a, &al);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&a, sizeof(a)), 0, "the kernel carries it");
	int u = socket(AF_INET, SOCK_DGRAM, 0);
	cr_assert_eq(connect(u, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(ferry_stats()->fallback_unavailable, 1, "the TCP connect, not the UDP one");
	cr_assert_eq(ferry_stats()->fallbacks, 1);
	close(u);
	close(c);
	close(lis);
}

Test(start, ineligible_sockets_do_not_start_ferry, .timeout = 30)
{
	env_udp();
	int u = socket(AF_INET, SOCK_DGRAM, 0);
	int x = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_geq(u, 0);
	cr_assert_geq(x, 0);
	cr_assert_eq(ferry_state(), FERRY_UNINIT, "only an eligible socket starts ferry");
	close(u);
	close(x);
}

Test(start, a_stream_is_carried_end_to_end, .timeout = 30)
{
	env_udp();
	int cli, srv, lis;
	stream_pair(&cli, &srv, &lis);
	cr_assert_eq(ferry_state(), FERRY_ON);
	cr_assert(fdtable_maybe(&fdtab, cli) && fdtable_maybe(&fdtab, srv));
	cr_assert_eq(write(cli, "ping", 4), 4);
	char buf[8];
	cr_assert_eq(read(srv, buf, sizeof(buf)), 4);
	cr_assert_arr_eq(buf, "ping", 4);
	struct sockaddr_in cn, sp;
	socklen_t l1 = sizeof(cn), l2 = sizeof(sp);
	cr_assert_eq(getsockname(cli, (struct sockaddr *)&cn, &l1), 0);
	cr_assert_eq(getpeername(srv, (struct sockaddr *)&sp, &l2), 0);
	cr_assert_eq(cn.sin_port, sp.sin_port, "the server sees the client's own name");
	cr_assert_neq(cn.sin_port, 0);
	cr_assert_eq(shutdown(cli, SHUT_WR), 0);
	cr_assert_eq(read(srv, buf, sizeof(buf)), 0, "EOF after the FIN");
	cr_assert_eq(write(srv, "pong", 4), 4, "the other direction still flows");
	cr_assert_eq(read(cli, buf, sizeof(buf)), 4);
	struct ferry_stats *st = ferry_stats();
	cr_assert_eq(st->streams_connected, 1);
	cr_assert_eq(st->streams_accepted, 1);
	cr_assert_eq(st->fallbacks, 0);
	close(cli);
	close(srv);
	close(lis);
}

/* Whether a thread of this process is called name. */
static bool thread_named(const char *name)
{
	return thread_tid_named(name) >= 0;
}

/* ferry's threads name themselves as they start (prctl): naming one from
 * its creator opens /proc/self/task/TID/comm, and with those dentries, reaping
 * a process cost its parent about 0.4 ms more (d_walk under wait4's
 * shrink_dcache_parent: postgres's postmaster, pgbench -S -C). So the
 * name may come a moment after ferry is on. */
static bool thread_named_soon(const char *name)
{
	for (int i = 0; i < 1000; i++) {
		if (thread_named(name))
			return true;
		usleep(1000);
	}
	return false;
}

Test(start, ferrys_threads_say_what_they_are, .timeout = 30)
{
	cr_assert_not(thread_named("ferry-progress"), "named before ferry started");
	env_udp();
	int cli, srv, lis;
	stream_pair(&cli, &srv, &lis);
	cr_assert_eq(ferry_state(), FERRY_ON);
	cr_assert(thread_named_soon("ferry-progress"));
	cr_assert(thread_named_soon("ferry-mgmt"));
	close(cli);
	close(srv);
	close(lis);
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY);
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text), "%s", path);
	close(fd);
}

/*
 * The kernel's pick for a bind to port 0 ignores UDP, but a listener's
 * rendezvous needs the same port free for UDP. In a network namespace whose
 * ephemeral range is half held by UDP sockets, every listener on any port
 * must still answer rendezvous (without the care, each has about an even
 * chance of a taken twin).
 */
Test(start, a_listener_on_any_port_gets_a_free_rendezvous_port, .timeout = 30)
{
	if (unshare(CLONE_NEWNET) != 0)
		cr_skip_test("unshare(CLONE_NEWNET): %s: needs root", strerror(errno));
	int ctl = socket(AF_INET, SOCK_DGRAM, 0);
	struct ifreq ifr = {.ifr_name = "lo"};
	cr_assert_eq(ioctl(ctl, SIOCGIFFLAGS, &ifr), 0);
	ifr.ifr_flags |= IFF_UP;
	cr_assert_eq(ioctl(ctl, SIOCSIFFLAGS, &ifr), 0, "lo up: %s", strerror(errno));
	close(ctl);
	/* Half the range held; the other half leaves room for ferry's own
	 * sockets (the nic's, mgmt's, a connected one per handshake under way,
	 * the client sockets' pooled ports) besides the listeners', even when
	 * a loaded host lets some of them close late (with 40 ports and 20 held
	 * the range ran out here once, under the whole suite). */
	write_file("/proc/sys/net/ipv4/ip_local_port_range", "41000 41199");
	enum { HELD = 100, LISTENERS = 8 };
	int held[HELD];
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	for (int i = 0; i < HELD; i++) {
		held[i] = socket(AF_INET, SOCK_DGRAM, 0);
		cr_assert_eq(bind(held[i], (struct sockaddr *)&lo, sizeof(lo)), 0);
	}
	env_udp();
	for (int i = 0; i < LISTENERS; i++) {
		int cli, srv, lis;
		stream_pair(&cli, &srv, &lis);
		close(cli);
		close(srv);
		close(lis);
	}
	struct ferry_stats *st = ferry_stats();
	cr_assert_eq(st->listeners_plain, 0, "every listener answers rendezvous");
	cr_assert_eq(st->listeners, LISTENERS);
	cr_assert_eq(st->streams_accepted, LISTENERS);
	cr_assert_eq(st->kernel_accepts, 0);
	for (int i = 0; i < HELD; i++)
		close(held[i]);
}

Test(start, a_fork_child_that_only_closes_leaves_the_parents_streams, .timeout = 30)
{
	env_udp();
	signal(SIGPIPE, SIG_IGN);
	int cli, srv, lis;
	stream_pair(&cli, &srv, &lis);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(5); /* a hang fails the test instead of blocking it */
		int ok = close(cli) == 0 && close(srv) == 0 && close(lis) == 0;
		/* New sockets in the child are ferry's, of a ferry of its own. */
		int s = socket(AF_INET, SOCK_STREAM, 0);
		ok &= s >= 0 && fdtable_maybe(&fdtab, s) && ferry_state() == FERRY_ON;
		_exit(ok ? 0 : 1);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	char buf[8];
	cr_assert_eq(write(cli, "after", 5), 5, "the child's closes did not touch the stream");
	cr_assert_eq(read(srv, buf, sizeof(buf)), 5);
	cr_assert_eq(write(srv, "fork", 4), 4);
	cr_assert_eq(read(cli, buf, sizeof(buf)), 4);
	close(cli);
	close(srv);
	close(lis);
}

/*
 * A fork child holds copies of the parent's sockets: none of those kernel
 * sockets (live at the fork, or pooled for reuse) may later stand behind a
 * new socket of the parent, or the child's copy would be that new socket.
 */
Test(start, no_socket_a_fork_child_holds_serves_a_later_socket, .timeout = 30)
{
	env_udp();
	int cli, srv, lis;
	stream_pair(&cli, &srv, &lis);
	enum { N = 4 };
	ino_t before[N + 2];
	int blank[N];
	for (int i = 0; i < N; i++) {
		blank[i] = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert_geq(blank[i], 0);
		before[i] = sock_ino(blank[i]);
	}
	for (int i = 0; i < N; i++)
		close(blank[i]); /* pooled, if pooling */
	before[N] = sock_ino(cli);
	before[N + 1] = sock_ino(srv);
	int gate[2];
	cr_assert_eq(pipe(gate), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char c;
		close(gate[1]);
		ssize_t r = read(gate[0], &c, 1); /* holds its copies until told */
		_exit(r < 0);
	}
	close(gate[0]);
	close(cli);
	close(srv);
	usleep(20000); /* the streams end; their placeholders would be free */
	for (int i = 0; i < 2 * N; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert_geq(s, 0);
		ino_t ino = sock_ino(s);
		for (int j = 0; j < N + 2; j++)
			cr_assert_neq(ino, before[j], "socket %d is one the child holds (%d)", i, j);
		close(s);
	}
	close(gate[1]);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	close(lis);
}

static uint16_t local_port(int fd)
{
	struct sockaddr_in a;
	socklen_t al = sizeof(a);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	return ntohs(a.sin_port);
}

static uint16_t peer_port(int fd)
{
	struct sockaddr_in a;
	socklen_t al = sizeof(a);
	cr_assert_eq(getpeername(fd, (struct sockaddr *)&a, &al), 0);
	return ntohs(a.sin_port);
}

static int connect_to(int lis)
{
	struct sockaddr_in a;
	socklen_t al = sizeof(a);
	cr_assert_eq(getsockname(lis, (struct sockaddr *)&a, &al), 0);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s", strerror(errno));
	return c;
}

/*
 * The kernel never has two connections with one pair of addresses: a
 * client's port stays taken while the server still holds the connection
 * the client closed, and comes back once both sides are done.
 */
Test(start, a_client_port_is_not_reused_while_the_server_holds_it, .timeout = 30)
{
	env_udp();
	int cli, srv, lis;
	stream_pair(&cli, &srv, &lis);
	uint16_t first = local_port(cli);
	close(cli);
	char b;
	cr_assert_eq(read(srv, &b, 1), 0, "the client's FIN");
	usleep(50000); /* our FIN acknowledged: the client's stream is done */
	int cli2 = connect_to(lis);
	int srv2 = accept(lis, NULL, NULL);
	cr_assert_geq(srv2, 0);
	cr_assert_neq(local_port(cli2), first, "the port of a connection the server still holds");
	cr_assert_neq(peer_port(srv2), peer_port(srv), "two accepted sockets, one peer address");
	close(srv); /* both sides done now: the port may serve again */
	usleep(50000);
	int cli3 = connect_to(lis);
	cr_assert_eq(local_port(cli3), first, "pooled again once both sides ended");
	close(cli3);
	close(cli2);
	close(srv2);
	close(lis);
}

/* The application's descriptor numbers are the kernel's: ferry's hidden
 * ones take neither much of the limit nor the lowest free numbers. */
Test(start, closed_sockets_keep_few_descriptors, .timeout = 30)
{
	env_udp();
	struct rlimit rl, low;
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	low = rl;
	low.rlim_cur = 256;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	int w = socket(AF_INET, SOCK_STREAM, 0); /* starts ferry */
	cr_assert_geq(w, 0);
	close(w);
	int base = count_fds();
	enum { N = 50 };
	int s[N];
	for (int i = 0; i < N; i++) {
		s[i] = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert_geq(s[i], 0);
	}
	for (int i = 0; i < N; i++)
		close(s[i]);
	cr_assert_leq(count_fds() - base, 256 / 16, "%d descriptors kept after %d sockets closed",
		      count_fds() - base, N);
	setrlimit(RLIMIT_NOFILE, &rl);
}

Test(start, a_socket_after_close_0_is_0, .timeout = 30)
{
	env_udp();
	int w = socket(AF_INET, SOCK_STREAM, 0); /* starts ferry */
	cr_assert_geq(w, 0);
	close(w);
	int t[3]; /* the pool's empty: the next socket is a new one */
	for (int i = 0; i < 3; i++)
		t[i] = socket(AF_INET, SOCK_STREAM, 0);
	int saved = dup(0);
	cr_assert_geq(saved, 0);
	close(0);
	int u = socket(AF_INET, SOCK_STREAM, 0);
	int v = socket(AF_INET, SOCK_STREAM, 0);
	int plain = open("/dev/null", O_RDONLY);
	close(plain);
	close(v);
	if (u != 0)
		close(u);
	dup2(saved, 0);
	close(saved);
	for (int i = 0; i < 3; i++)
		close(t[i]);
	cr_assert_eq(u, 0, "socket() after close(0): the lowest free number");
	cr_assert_eq(plain, v + 1, "open(): the next free number after the sockets");
}

/*
 * A fork child copies the placeholder a closing client stream holds for
 * its port: the parent never uses that kernel socket again, and the child
 * closes its copy.
 */
Test(start, a_closing_streams_placeholder_is_not_reused_after_fork, .timeout = 30)
{
	env_udp();
	int cli, srv, lis;
	stream_pair(&cli, &srv, &lis);
	ino_t old = sock_ino(cli);
	close(cli); /* the server still holds its end: the placeholder waits */
	char b;
	cr_assert_eq(read(srv, &b, 1), 0);
	usleep(20000);
	int gate[2];
	cr_assert_eq(pipe(gate), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(gate[1]);
		int held = 0;
		DIR *d = opendir("/proc/self/fd");
		for (struct dirent *e; d && (e = readdir(d));) {
			struct stat st;
			int fd = atoi(e->d_name);
			held += e->d_name[0] != '.' && fstat(fd, &st) == 0 && st.st_ino == old;
		}
		if (d)
			closedir(d);
		char c;
		ssize_t r = read(gate[0], &c, 1); /* holds what it has until told */
		_exit(held ? 2 : r < 0);
	}
	close(gate[0]);
	close(srv); /* both sides done: the placeholder is free */
	usleep(50000);
	for (int i = 0; i < 4; i++) {
		int c = connect_to(lis);
		ino_t ino = sock_ino(c);
		int a = accept(lis, NULL, NULL);
		cr_assert_neq(ino, old, "connection %d is the socket the child holds", i);
		close(c);
		close(a);
	}
	close(gate[1]);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the child kept a copy of the placeholder (status %d)", status);
	close(lis);
}

Test(start, counters_are_written_on_demand, .timeout = 30)
{
	env_udp();
	char path[128];
	snprintf(path, sizeof(path), "/tmp/ferry-test-stats.%d.json", (int)getpid());
	unlink(path);
	setenv("FERRY_STATS", "/tmp/ferry-test-stats.%p.json", 1);
	int cli, srv, lis;
	stream_pair(&cli, &srv, &lis);
	raise(SIGRTMIN + FERRY_STATS_SIGNAL_OFFSET);
	struct stat sb;
	for (int i = 0; i < 200 && stat(path, &sb) != 0; i++)
		usleep(10000);
	cr_assert_eq(stat(path, &sb), 0, "dumped while running: %s", path);
	char buf[4096] = "";
	FILE *fp = fopen(path, "r");
	cr_assert_not_null(fp);
	size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	cr_assert_gt(n, 0);
	cr_assert_not_null(strstr(buf, "\"streams_connected\":1"), "%s", buf);
	cr_assert_not_null(strstr(buf, "\"streams_accepted\":1"), "%s", buf);
	unlink(path);
	close(cli);
	close(srv);
	close(lis);
}
