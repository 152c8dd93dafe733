/* The interposer in a real process: stdio on a ferry connection reads and
 * writes the connection as on a kernel socket (stdfile.h) -- a FILE from
 * fdopen, and the standard streams once the connection is dup2'd onto 0
 * and 1 -- and exit flushes what printf left before ferry ends its streams.
 * The exec'd service of the inetd model: tests/integration/xinetd.sh. Each
 * test is its own process (criterion). */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/options.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
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


/* Reads what the peer sends until it ends the stream (bounded: a hang is
 * the failure). */
static size_t read_to_end(int fd, char *buf, size_t cap)
{
	size_t got = 0;
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		cr_assert_eq(poll(&p, 1, 10000), 1, "the peer never ended the stream");
		ssize_t n = read(fd, buf + got, cap - 1 - got);
		cr_assert_geq(n, 0, "read: %s", strerror(errno));
		if (n == 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	return got;
}

Test(stdfile, a_file_fdopen_makes_on_a_connection_reads_writes_and_closes_it, .timeout = 60)
{
	env_udp();
	struct sockaddr_in a;
	int lis = loopback_listener(&a), c, srv;
	loopback_connection(lis, &a, &c, &srv);
	struct ffile *sf = fdtable_get(&fdtab, srv);
	cr_assert_not_null(sf, "the accepted connection is not ferry's");
	ffile_put(&fdtab, sf);
	FILE *f = fdopen(srv, "r+");
	cr_assert_not_null(f, "fdopen: %s", strerror(errno));
	cr_assert_eq(fileno(f), srv, "fileno says %d, not the socket's %d", fileno(f), srv);
	cr_assert_eq(write(c, "hello\n", 6), 6);
	char line[64];
	cr_assert_not_null(fgets(line, sizeof(line), f), "fgets read nothing of the peer's line");
	cr_assert_str_eq(line, "hello\n");
	cr_assert_gt(fprintf(f, "got: %s", line), 0);
	cr_assert_eq(fclose(f), 0, "fclose: %s", strerror(errno));
	cr_assert_null(fdtable_get(&fdtab, srv), "fclose left the number in ferry's table");
	char buf[64];
	read_to_end(c, buf, sizeof(buf));
	cr_assert_str_eq(buf, "got: hello\n");
	close(c);
	close(lis);
}

/* A file that is not ferry's stays glibc's own. */
Test(stdfile, fdopen_on_a_pipe_is_glibcs, .timeout = 30)
{
	env_udp();
	int p[2];
	cr_assert_eq(pipe(p), 0);
	FILE *f = fdopen(p[1], "w");
	cr_assert_not_null(f);
	cr_assert_eq(fileno(f), p[1]);
	cr_assert_gt(fprintf(f, "x"), 0);
	cr_assert_eq(fclose(f), 0);
	char b;
	cr_assert_eq(read(p[0], &b, 1), 1);
	cr_assert_eq(b, 'x');
	close(p[0]);
}

/* The fork-and-serve shape with stdio: the child puts the connection on 0
 * and 1, reads a line from stdin, answers with printf and leaves by exit,
 * which must flush stdout before ferry ends the stream. The client is a
 * process of its own: a child cannot take over a connection whose other end
 * its parent holds (ferry(7), KNOWN LIMITS). */
Test(stdfile, a_child_serves_its_connection_through_stdin_and_stdout, .timeout = 60)
{
	env_udp();
	struct sockaddr_in a;
	int lis = loopback_listener(&a);
	pid_t client = fork();
	cr_assert_geq(client, 0);
	if (client == 0) {
		close(lis);
		int c = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(c, (struct sockaddr *)&a, sizeof(a)) != 0 || write(c, "ping\n", 5) != 5)
			_exit(2);
		char buf[64];
		size_t got = 0;
		ssize_t n;
		while ((n = read(c, buf + got, sizeof(buf) - 1 - got)) > 0)
			got += (size_t)n;
		buf[got] = '\0';
		_exit(n == 0 && strcmp(buf, "child got: ping\n") == 0 ? 0 : 3);
	}
	int srv = accept(lis, NULL, NULL);
	cr_assert_geq(srv, 0);
	pid_t server = fork();
	cr_assert_geq(server, 0);
	if (server == 0) {
		close(lis); /* what it leaves open, the leak checker's exit counts */
		if (dup2(srv, 0) != 0 || dup2(srv, 1) != 1)
			_exit(2);
		close(srv);
		char line[64];
		if (!fgets(line, sizeof(line), stdin))
			_exit(3);
		printf("child got: %s", line);
		exit(0);
	}
	close(srv);
	int status;
	cr_assert_eq(waitpid(server, &status, 0), server);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the serving child failed (status %#x: 3 is no line on stdin)", status);
	cr_assert_eq(waitpid(client, &status, 0), client);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the client failed (status %#x: 3 is not the answer, or no end of stream)", status);
	close(lis);
}
