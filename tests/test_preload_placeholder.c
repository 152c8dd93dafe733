/* A socket's pooled placeholder once the kernel keeps state of it
 * (sock_kernel_own): the socket is never pooled again, the flags ferry kept
 * reach the kernel, and the hidden descriptor goes at once. The interposer
 * runs in this process; each test is its own process (criterion). */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/options.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload_proc_util.h"

/* As test_preload_start: one test at a time (criterion's runner leaks
 * under LeakSanitizer with two workers). */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	criterion_options.jobs = 1;
}

/* The kernel's own flags of fd, past ferry's answer from its status. */
static int kernel_flags(int fd)
{
	return (int)syscall(SYS_fcntl, fd, F_GETFL);
}

static void kernel_keeps_state(int fd)
{
	int v = 8192;
	cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)), 0);
}

/* A socket whose placeholder came from the pool (one closed untouched
 * before, so the pool has it). */
static int pooled_socket(void)
{
	int w = socket(AF_INET, SOCK_STREAM, 0); /* starts ferry */
	cr_assert_geq(w, 0);
	ino_t ino = sock_ino(w);
	close(w);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(s, 0);
	cr_assert_eq(sock_ino(s), ino, "an untouched socket is pooled and serves the next one");
	return s;
}

Test(placeholder, a_socket_the_kernel_keeps_state_of_is_never_pooled_again, .timeout = 30)
{
	env_udp();
	int s = pooled_socket();
	ino_t ino = sock_ino(s);
	kernel_keeps_state(s);
	close(s);
	for (int i = 0; i < 4; i++) {
		int t = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert_geq(t, 0);
		cr_assert_neq(sock_ino(t), ino, "socket %d got the one with an option set", i);
		int v = 0;
		socklen_t vl = sizeof(v);
		cr_assert_eq(getsockopt(t, SOL_SOCKET, SO_RCVBUF, &v, &vl), 0);
		close(t);
	}
}

Test(placeholder, flags_kept_while_pooled_reach_the_kernel, .timeout = 30)
{
	env_udp();
	int s = pooled_socket();
	cr_assert_eq(fcntl(s, F_SETFL, O_NONBLOCK), 0);
	cr_assert(fcntl(s, F_GETFL) & O_NONBLOCK);
	cr_assert_not(kernel_flags(s) & O_NONBLOCK, "kept by ferry while the placeholder is pooled");
	kernel_keeps_state(s);
	cr_assert(kernel_flags(s) & O_NONBLOCK, "the kernel's once it keeps state");
	cr_assert_eq(fcntl(s, F_SETFL, 0), 0);
	cr_assert_not(kernel_flags(s) & O_NONBLOCK, "and from then on set there");
	close(s);
}

Test(placeholder, the_hidden_descriptor_goes_when_the_kernel_keeps_state, .timeout = 30)
{
	env_udp();
	int s = pooled_socket();
	int before = count_fds();
	kernel_keeps_state(s);
	cr_assert_eq(count_fds(), before - 1, "the socket is its number's alone");
	int v = 0;
	socklen_t vl = sizeof(v);
	cr_assert_eq(getsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &vl), 0);
	cr_assert_geq(v, 8192, "the same socket, option and all");
	close(s);
}
