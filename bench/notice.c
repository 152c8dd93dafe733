/*
 * notice [ROUNDS]: how long a client blocked in recv takes to learn that its
 * server was SIGKILLed. Each round forks a server (listens on 127.0.0.1,
 * sends one byte, waits to be killed) and a client (takes the byte, blocks
 * in recv, notes when it returns); the parent kills the server once the
 * client is blocked. Run it under ferry-run to time ferry's death notice,
 * plainly to time the kernel's FIN. Prints min, median and max in ms as one
 * JSON line. Both children start their own ferry (fork starts afresh).
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void must(int ok, const char *what)
{
	if (!ok) {
		perror(what);
		exit(1);
	}
}

static void serve(int out)
{
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	must(l >= 0 && !bind(l, (struct sockaddr *)&a, len) && !listen(l, 1) &&
		     !getsockname(l, (struct sockaddr *)&a, &len),
	     "listen");
	must(write(out, &a.sin_port, sizeof(a.sin_port)) == sizeof(a.sin_port), "write port");
	int fd = accept(l, NULL, NULL);
	must(fd >= 0 && send(fd, "x", 1, 0) == 1, "accept");
	for (;;)
		pause();
}

/* Reports "blocked" (0) then the time recv returned and its result. */
static void client(int in, int out)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	must(read(in, &a.sin_port, sizeof(a.sin_port)) == sizeof(a.sin_port), "read port");
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	must(fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a)), "connect");
	char c;
	must(recv(fd, &c, 1, 0) == 1, "recv hello");
	int64_t msg[2] = {0, 0};
	must(write(out, msg, sizeof(msg)) == sizeof(msg), "write");
	ssize_t r = recv(fd, &c, 1, 0);
	msg[0] = now_ns();
	msg[1] = r;
	must(write(out, msg, sizeof(msg)) == sizeof(msg), "write");
	exit(0);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 20;
	if (rounds < 1 || rounds > 10000)
		return 2;
	double *ms = calloc((size_t)rounds, sizeof(*ms));
	int eof = 0;
	must(ms != NULL, "calloc");
	for (int i = 0; i < rounds; i++) {
		int port[2], rep[2];
		must(!pipe(port) && !pipe(rep), "pipe");
		pid_t srv = fork();
		must(srv >= 0, "fork");
		if (srv == 0)
			serve(port[1]);
		pid_t cli = fork();
		must(cli >= 0, "fork");
		if (cli == 0)
			client(port[0], rep[1]);
		int64_t msg[2];
		must(read(rep[0], msg, sizeof(msg)) == sizeof(msg), "client ready");
		usleep(50000); /* the client is blocked in recv by now */
		int64_t t0 = now_ns();
		kill(srv, SIGKILL);
		must(read(rep[0], msg, sizeof(msg)) == sizeof(msg), "client result");
		ms[i] = (double)(msg[0] - t0) / 1e6;
		eof += msg[1] == 0;
		waitpid(srv, NULL, 0);
		waitpid(cli, NULL, 0);
		close(port[0]);
		close(port[1]);
		close(rep[0]);
		close(rep[1]);
	}
	qsort(ms, (size_t)rounds, sizeof(*ms), cmp);
	printf("{\"test\":\"notice_sigkill\",\"rounds\":%d,\"eof\":%d,\"min_ms\":%.3f,"
	       "\"median_ms\":%.3f,\"max_ms\":%.3f}\n",
	       rounds, eof, ms[0], ms[rounds / 2], ms[rounds - 1]);
	free(ms);
	return 0;
}
