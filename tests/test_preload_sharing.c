/* The interposer in a real process: no kernel socket behind a ferry socket
 * is ever shared with a later one once another process may hold it (a
 * descriptor passed with SCM_RIGHTS, a child of posix_spawn or popen),
 * duplicated numbers keep their own FD_CLOEXEC through connect, and a
 * passed connection is described for its receiver (passfd.h; the receiver
 * in another process: tests/integration/process.sh). Each test is its own
 * process (criterion). */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/options.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload_proc_util.h"

extern char **environ;

/* One test at a time, as in test_preload_start (criterion's own leak). */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	criterion_options.jobs = 1;
}

/* Sockets made and closed after the sharing: none may be the shared one. */
static void assert_never_again(ino_t shared)
{
	for (int i = 0; i < 8; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert_geq(s, 0);
		cr_assert_neq(sock_ino(s), shared, "socket %d is the one another process holds", i);
		close(s);
	}
}

Test(sharing, a_socket_passed_with_scm_rights_is_never_reused, .timeout = 30)
{
	env_udp();
	int sv[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(s, 0);
	cr_assert_eq(ferry_state(), FERRY_ON);
	ino_t passed = sock_ino(s);
	pass_fd(sv[0], s); /* sv[1]'s queue now holds the kernel socket */
	close(s);
	assert_never_again(passed);
	close(sv[0]);
	close(sv[1]);
}

/* Whether a ferry process describes the socket with this inode (passfd.h). */
static bool described(ino_t ino)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "ferry-pass.%llu",
			 (unsigned long long)ino);
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_geq(s, 0);
	bool yes = connect(s, (struct sockaddr *)&a,
			   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) == 0;
	close(s);
	return yes;
}


/* A passed connection is described for the receiver; an unconnected socket,
 * which cannot follow as a ferry socket, is not. */
Test(sharing, a_passed_connection_is_described_and_an_unconnected_socket_is_not, .timeout = 30)
{
	env_udp();
	struct sockaddr_in a;
	int lis = loopback_listener(&a), c, srv, sv[2];
	loopback_connection(lis, &a, &c, &srv);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	int blank = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_not(described(sock_ino(c)), "described before it was passed");
	pass_fd(sv[0], c);
	pass_fd(sv[0], blank);
	cr_assert(described(sock_ino(c)), "the passed connection is not described");
	cr_assert_not(described(sock_ino(blank)), "an unconnected socket is described");
	cr_assert_eq(ferry_stats()->sockets_passed, 1);
	close(blank);
	close(sv[0]);
	close(sv[1]);
	close(srv);
	close(c);
	close(lis);
}

/* Passed to this very process, a connection arrives as a second number of
 * it, as a dup: bytes go either way through both numbers. */
Test(sharing, a_connection_passed_to_this_process_is_another_number_of_it, .timeout = 30)
{
	env_udp();
	struct sockaddr_in at;
	int lis = loopback_listener(&at), c, srv, sv[2];
	loopback_connection(lis, &at, &c, &srv);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pass_fd(sv[0], srv);
	int got = recv_fd(sv[1]);
	struct ffile *a = fdtable_get(&fdtab, srv), *b = fdtable_get(&fdtab, got);
	cr_assert_not_null(b, "the received number is not ferry's");
	cr_assert_eq(a, b, "the received number is another file");
	ffile_put(&fdtab, a);
	ffile_put(&fdtab, b);
	cr_assert_eq(write(c, "ping", 4), 4);
	char buf[8] = {0};
	cr_assert_eq(read(got, buf, sizeof(buf)), 4);
	cr_assert_str_eq(buf, "ping");
	close(srv); /* the other number holds the connection */
	cr_assert_eq(write(got, "pong", 4), 4);
	memset(buf, 0, sizeof(buf));
	cr_assert_eq(read(c, buf, sizeof(buf)), 4);
	cr_assert_str_eq(buf, "pong");
	close(got);
	close(sv[0]);
	close(sv[1]);
	close(c);
	close(lis);
}

Test(sharing, a_socket_a_spawned_child_inherits_is_never_reused, .timeout = 30)
{
	env_udp();
	int s = socket(AF_INET, SOCK_STREAM, 0); /* no close-on-exec */
	cr_assert_geq(s, 0);
	ino_t inherited = sock_ino(s);
	pid_t pid;
	char *argv[] = {"sleep", "1", NULL};
	cr_assert_eq(posix_spawnp(&pid, "sleep", NULL, NULL, argv, environ), 0);
	close(s);
	assert_never_again(inherited);
	int status;
	waitpid(pid, &status, 0);
}

Test(sharing, a_socket_a_popen_child_inherits_is_never_reused, .timeout = 30)
{
	env_udp();
	int s = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(s, 0);
	ino_t inherited = sock_ino(s);
	FILE *child = popen("sleep 1", "r");
	cr_assert_not_null(child);
	close(s);
	assert_never_again(inherited);
	pclose(child);
}

Test(sharing, a_duplicate_keeps_its_own_close_on_exec_through_connect, .timeout = 30)
{
	env_udp();
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	for (int cloexec = 0; cloexec < 2; cloexec++) {
		int s = socket(AF_INET, SOCK_STREAM | (cloexec ? 0 : SOCK_CLOEXEC), 0);
		/* The duplicate has the other flag; the first number goes. */
		int d = cloexec ? fcntl(s, F_DUPFD_CLOEXEC, 0) : dup(s);
		cr_assert_geq(d, 0);
		close(s);
		int want = cloexec ? FD_CLOEXEC : 0;
		cr_assert_eq(fcntl(d, F_GETFD) & FD_CLOEXEC, want);
		cr_assert_eq(connect(d, (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
		cr_assert_eq(fcntl(d, F_GETFD) & FD_CLOEXEC, want, "FD_CLOEXEC changed at connect");
		int srv = accept(lis, NULL, NULL);
		cr_assert_geq(srv, 0);
		close(srv);
		close(d);
	}
	close(lis);
}
