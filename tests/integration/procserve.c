/*
 * procserve MODE PORT [CMD...]: an echo server on 127.0.0.1:PORT in one of
 * the process models servers use, for tests/integration/process.sh.
 *   fork      accept, fork; the child echoes until EOF and exits, the parent
 *             closes its copy at once (postgres, sshd);
 *   keep      accept, fork a child that closes its copy and exits, and echo
 *             in the parent (a parent that keeps a connection a child held);
 *   exec      accept, fork; the child makes the connection its stdin and
 *             stdout and execs CMD (inetd);
 *   prefork   listen, fork two workers that accept and echo, then exit the
 *             master: its workers serve on (a master that exits);
 *   activate  listen, make the listener fd 3 with LISTEN_FDS=1 and exec CMD
 *             in this process (systemd socket activation);
 *   serve3    accept on fd 3 and echo, one connection at a time (CMD above).
 * Echoing stops at the peer's EOF; the server then closes. Runs until
 * killed. Writes "ready" to stdout once listening.
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int listen_on(int port)
{
	int l = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 128) != 0) {
		perror("procserve: listen");
		exit(1);
	}
	return l;
}

/* Echoes until EOF; exit status 0 only if every byte went back. */
static int echo(int c)
{
	char buf[65536];
	ssize_t n;
	while ((n = read(c, buf, sizeof(buf))) > 0) {
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(c, buf + off, (size_t)(n - off));
			if (w <= 0) {
				perror("procserve: write");
				return 2;
			}
			off += w;
		}
	}
	if (n < 0) {
		perror("procserve: read");
		return 3;
	}
	return 0;
}

/* Killed by the test: exit normally, so ferry writes its counters. */
static void on_term(int sig)
{
	(void)sig;
	exit(0);
}

static void ready(void)
{
	printf("ready\n");
	fflush(stdout);
}

static int accept_retry(int l)
{
	int c;
	while ((c = accept(l, NULL, NULL)) < 0)
		if (errno != EINTR && errno != ECONNABORTED)
			return -1;
	return c;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: procserve MODE PORT [CMD...]\n");
		return 2;
	}
	const char *mode = argv[1];
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_term);
	if (!strcmp(mode, "serve3")) {
		ready();
		for (;;) {
			int c = accept_retry(3);
			if (c < 0)
				return 1;
			echo(c);
			close(c);
		}
	}
	signal(SIGCHLD, SIG_IGN); /* no zombies: children are not waited for */
	int l = listen_on(atoi(argv[2]));
	if (!strcmp(mode, "activate")) {
		if (argc < 4 || dup2(l, 3) != 3)
			return 2;
		if (l != 3)
			close(l);
		char pid[32];
		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		setenv("LISTEN_FDS", "1", 1);
		setenv("LISTEN_PID", pid, 1);
		execvp(argv[3], argv + 3);
		perror("procserve: exec");
		return 127;
	}
	if (!strcmp(mode, "prefork")) {
		for (int i = 0; i < 2; i++) {
			if (fork() == 0) {
				for (;;) {
					int c = accept_retry(l);
					if (c < 0)
						_exit(1);
					echo(c);
					close(c);
				}
			}
		}
		ready();
		exit(0);
	}
	ready();
	for (;;) {
		int c = accept_retry(l);
		if (c < 0)
			return 1;
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (!strcmp(mode, "keep")) {
			if (pid == 0) {
				close(c);
				close(l);
				exit(0);
			}
			echo(c);
			close(c);
			continue;
		}
		if (pid == 0) {
			close(l);
			if (!strcmp(mode, "exec")) {
				if (dup2(c, 0) != 0 || dup2(c, 1) != 1)
					_exit(126);
				close(c);
				execvp(argv[3], argv + 3);
				_exit(127);
			}
			int rc = echo(c);
			close(c);
			exit(rc); /* exit, not _exit: buffered bytes and the FIN go at exit */
		}
		close(c);
	}
}
