/* The interposer in a real process: no kernel socket behind a ferry socket
 * is ever shared with a later one once another process may hold it (a
 * descriptor passed with SCM_RIGHTS, a child of posix_spawn or popen), and
 * duplicated numbers keep their own FD_CLOEXEC through connect. Each test
 * is its own process (criterion). */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/options.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

static void pass_fd(int via, int fd)
{
	char byte = 0, ctl[CMSG_SPACE(sizeof(int))];
	memset(ctl, 0, sizeof(ctl));
	struct iovec io = {.iov_base = &byte, .iov_len = 1};
	struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl,
			   .msg_controllen = sizeof(ctl)};
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof(fd));
	cr_assert_eq(sendmsg(via, &m, 0), 1, "sendmsg: %s", strerror(errno));
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

/* A connection ferry carries cannot follow its descriptor into another
 * process: the one who passes it is told, in the log. */
Test(sharing, passing_a_ferry_connection_says_it_cannot_follow, .timeout = 30)
{
	env_udp();
	char log[] = "/tmp/ferry-sharing-log.XXXXXX";
	int lf = mkstemp(log);
	cr_assert_geq(lf, 0);
	close(lf);
	setenv("FERRY_LOG_FILE", log, 1);
	setenv("FERRY_LOG", "warn", 1);
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
	int srv = accept(lis, NULL, NULL);
	cr_assert_geq(srv, 0);
	int sv[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pass_fd(sv[0], c);
	FILE *f = fopen(log, "r");
	cr_assert_not_null(f);
	char line[512];
	bool told = false;
	while (!told && fgets(line, sizeof(line), f))
		told = strstr(line, "SCM_RIGHTS") != NULL;
	fclose(f);
	unlink(log);
	cr_assert(told, "no word of the passed connection in the log");
	close(sv[0]);
	close(sv[1]);
	close(srv);
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
