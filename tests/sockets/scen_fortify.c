/*
 * Scenario: the entry points a fortified, large-file build links against
 * (__read_chk, __recv_chk, __recvfrom_chk, __poll_chk, __ppoll_chk,
 * __fdelt_chk, fcntl64, sendfile64) reach the same stream as the plain ones,
 * and the bound checks abort as glibc's do.
 */
#if defined(__OPTIMIZE__) && !defined(_FORTIFY_SOURCE)
#define _FORTIFY_SOURCE 2
#endif
/* Makes glibc's headers call fcntl64 and sendfile64, as redis' build does. */
#define _FILE_OFFSET_BITS 64

#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

ssize_t __read_chk(int fd, void *buf, size_t nbytes, size_t buflen);

/* Sizes the compiler cannot see, so it emits the _chk calls. */
static volatile size_t opaque_len = 8;
static volatile nfds_t opaque_nfds = 1;

static void fortify_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char buf[64] = {0};
	for (int i = 0; i < 4; i++) {
		sync_wait(p);
		send(fd, "fortify!", 8, 0);
	}
	expect_rc(p, "read_sendfile", read_full(fd, buf, 26), 26, 0);
	expect_str(p, "sendfile_bytes", buf, "abcdefghijklmnopqrstuvwxyz");
	sync_send(p);
	sync_wait(p);
	close(fd);
}

static void fortify_client(struct peer *p)
{
#ifdef _FORTIFY_SOURCE
	expect_str(p, "fortified", "yes", "yes");
#else
	expect_str(p, "fortified", "no (unoptimised build)", "no (unoptimised build)");
#endif
	int fd = tcp_connect(p, p->port);
	char buf[16];
	struct pollfd pfd[1] = {{.fd = fd, .events = POLLIN}};

	sync_send(p);
	expect_rc(p, "poll_chk", poll(pfd, opaque_nfds, 5000), 1, 0);
	expect_rc(p, "read_chk", read(fd, buf, opaque_len), 8, 0);
	sync_send(p);
	struct timespec ts = {.tv_sec = 5};
	expect_rc(p, "ppoll_chk", ppoll(pfd, opaque_nfds, &ts, NULL), 1, 0);
	expect_rc(p, "recv_chk", recv(fd, buf, opaque_len, 0), 8, 0);
	sync_send(p);
	fd_set rd;
	FD_ZERO(&rd);
	volatile int vfd = fd;
	FD_SET(vfd, &rd);
	struct timeval tv = {.tv_sec = 5};
	expect_rc(p, "select_fdelt_chk", select(fd + 1, &rd, NULL, NULL, &tv), 1, 0);
	expect_true(p, "fd_isset", FD_ISSET(vfd, &rd));
	expect_rc(p, "recvfrom_chk", recvfrom(fd, buf, opaque_len, 0, NULL, NULL), 8, 0);
	expect_true(p, "bytes", !memcmp(buf, "fortify!", 8));

	int fl = fcntl(fd, F_GETFL);
	expect_rc(p, "fcntl64_setfl", fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0, 0);
	expect_true(p, "fcntl64_getfl", fcntl(fd, F_GETFL) & O_NONBLOCK);
	expect_rc(p, "nonblocking_read_chk", read(fd, buf, opaque_len), -1, EAGAIN);
	fcntl(fd, F_SETFL, fl);
	sync_send(p);
	expect_rc(p, "blocking_read_chk", read(fd, buf, opaque_len), 8, 0);

	FILE *f = tmpfile();
	fputs("abcdefghijklmnopqrstuvwxyz", f);
	fflush(f);
	off_t off = 0;
	expect_rc(p, "sendfile64", sendfile(fd, fileno(f), &off, 26), 26, 0);
	expect_int(p, "sendfile64_offset", (long)off, 26);
	fclose(f);
	sync_wait(p);

	/* Asking for more than the buffer holds must abort, as glibc's does. */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		char small[4];
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, STDERR_FILENO); /* "*** buffer overflow detected ***" */
		if (__read_chk(fd, small, opaque_len + 100, sizeof(small)) < 0)
			_exit(1);
		_exit(0);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	expect_true(p, "read_chk_overflow_aborts", WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
	sync_send(p);
	close(fd);
}

const struct scenario scen_fortify[] = {
	{"fortified_entry_points", fortify_server, fortify_client, false},
	{NULL, NULL, NULL, false},
};
