/* The interposer in a real process: a ferry connection closed by any of the
 * ways a program closes a descriptor -- close, close_range, or syscall(3)
 * with SYS_close or SYS_close_range as libuv (node) does -- ends for its
 * peer and leaves ferry's table, so the number is free for the next socket
 * the kernel gives it (close.h; node's cluster: tests/integration/node.sh).
 * Each test is its own process (criterion). */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/options.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload_proc_util.h"

/* One test at a time, as in test_preload_start (criterion's own leak). */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	criterion_options.jobs = 1;
}

/* A connection to lis whose accepted end is ferry's. */
static void connected_pair(int lis, const struct sockaddr_in *a, int *c, int *srv)
{
	loopback_connection(lis, a, c, srv);
	struct ffile *f = fdtable_get(&fdtab, *srv);
	cr_assert_not_null(f, "the accepted connection is not ferry's");
	ffile_put(&fdtab, f);
}

enum closer { BY_CLOSE, BY_CLOSE_RANGE, BY_SYSCALL_CLOSE, BY_SYSCALL_CLOSE_RANGE, CLOSERS };
static const char *const closer_name[CLOSERS] = {"close", "close_range", "syscall(SYS_close)",
						 "syscall(SYS_close_range)"};

static int close_by(enum closer how, int fd)
{
	switch (how) {
	case BY_CLOSE:
		return close(fd);
	case BY_CLOSE_RANGE:
#ifdef HAVE_CLOSE_RANGE
		return close_range((unsigned)fd, (unsigned)fd, 0);
#else
		return close(fd);
#endif
	case BY_SYSCALL_CLOSE:
		return (int)syscall(SYS_close, fd);
	default:
		return (int)syscall(SYS_close_range, fd, fd, 0);
	}
}

Test(close, every_way_of_closing_ends_the_connection_for_its_peer, .timeout = 60)
{
	env_udp();
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	cr_assert_eq(ferry_state(), FERRY_ON);
	for (int how = 0; how < CLOSERS; how++) {
		int c, srv;
		connected_pair(lis, &a, &c, &srv);
		cr_assert_eq(close_by(how, srv), 0, "%s: %s", closer_name[how], strerror(errno));
		cr_assert_null(fdtable_get(&fdtab, srv), "%s left the number in ferry's table",
			       closer_name[how]);
		/* The peer reads its end: a hang here is the bug, so the wait is
		 * long and only bounds a failure. */
		struct pollfd p = {.fd = c, .events = POLLIN};
		cr_assert_eq(poll(&p, 1, 10000), 1, "%s: the peer never heard the close",
			     closer_name[how]);
		char byte;
		cr_assert_eq(read(c, &byte, 1), 0, "%s: the peer read no end of stream",
			     closer_name[how]);
		close(c);
	}
	close(lis);
}

/* A close ferry cannot see: the system call instruction itself, as a
 * program that bypasses libc makes it. */
#if defined(__x86_64__)
static int close_unseen(int fd)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_close), "D"((long)fd) : "rcx", "r11", "memory");
	return (int)ret;
}
#endif

/* node's cluster: the primary passes each connection to a worker, which
 * closed the last one with SYS_close; the next one arrives at that number
 * and must be ferry's connection, not what the number named before. Closed
 * where ferry cannot see it, the number's old entry is known stale all the
 * same: the kernel just gave that number out. */
static void passed_into_a_freed_number(int (*close_fn)(int fd), const char *how)
{
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	int c1, srv1, c2, srv2, sv[2];
	connected_pair(lis, &a, &c1, &srv1);
	connected_pair(lis, &a, &c2, &srv2);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	/* Passed first: passing makes a socket of its own (passfd.h), which
	 * would take the number. */
	pass_fd(sv[0], srv2);
	cr_assert_eq(close_fn(srv1), 0, "%s", how);
	int got = recv_fd(sv[1]);
	cr_assert_eq(got, srv1, "%s: the kernel gave %d, not the number just freed (%d)", how, got,
		     srv1);
	struct ffile *want = fdtable_get(&fdtab, srv2), *is = fdtable_get(&fdtab, got);
	cr_assert_not_null(is, "%s: the received number is not ferry's", how);
	cr_assert_eq(is, want, "%s: the received number names another file than the passed one", how);
	ffile_put(&fdtab, want);
	ffile_put(&fdtab, is);
	cr_assert_eq(write(c2, "ping", 4), 4);
	char buf[8] = {0};
	cr_assert_eq(read(got, buf, sizeof(buf)), 4, "%s", how);
	cr_assert_str_eq(buf, "ping");
	close(got);
	close(srv2);
	close(sv[0]);
	close(sv[1]);
	close(c1);
	close(c2);
	close(lis);
}

static int close_by_syscall(int fd)
{
	return (int)syscall(SYS_close, fd);
}

Test(close, a_connection_passed_into_a_number_syscall_close_freed_is_the_passed_one,
     .timeout = 60)
{
	env_udp();
	passed_into_a_freed_number(close_by_syscall, "syscall(SYS_close)");
}

Test(close, a_connection_passed_into_a_number_an_unseen_close_freed_is_the_passed_one,
     .timeout = 60)
{
#if defined(__x86_64__)
	env_udp();
	passed_into_a_freed_number(close_unseen, "the syscall instruction");
#else
	cr_skip_test("the unseen close is written for x86-64");
#endif
}
