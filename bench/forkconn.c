/*
 * forkconn: the cost of a connection to a fork-per-connection server
 * (postgres, sshd, inetd), without the server's own work.
 *
 *   forkconn serve PORT       accepts on 127.0.0.1:PORT; each connection's
 *                             child echoes 64 bytes and exits, the parent
 *                             closes its copy at once. SIGUSR1 prints the
 *                             CPU time and context switches so far of the
 *                             parent (all its threads) and of its children
 *                             (reaped first), and the connections served.
 *   forkconn connect PORT N   N connections one after another, each
 *                             connect, write 64 bytes, read them back,
 *                             close; prints the rate, the p50 and p99 of a
 *                             whole connection, and this process's CPU time
 *                             and context switches per connection.
 * Output is one line of "key value" pairs (bench/forkconn.sh reads them).
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG 64

static volatile sig_atomic_t report_asked;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static long cpu_us(const struct rusage *r)
{
	return (long)(r->ru_utime.tv_sec + r->ru_stime.tv_sec) * 1000000L + r->ru_utime.tv_usec +
	       r->ru_stime.tv_usec;
}

static long switches(const struct rusage *r)
{
	return r->ru_nvcsw + r->ru_nivcsw;
}

static struct sockaddr_in loopback(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static int echo(int fd)
{
	char b[MSG];
	size_t got = 0;
	while (got < MSG) {
		ssize_t n = read(fd, b + got, MSG - got);
		if (n <= 0)
			return 1;
		got += (size_t)n;
	}
	return write(fd, b, MSG) == MSG ? 0 : 1;
}

static void on_usr1(int sig)
{
	(void)sig;
	report_asked = 1;
}

static void report(long served)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	struct rusage self, kids;
	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &kids);
	printf("parent_cpu_us %ld parent_switches %ld children_cpu_us %ld children_switches %ld "
	       "served %ld\n",
	       cpu_us(&self), switches(&self), cpu_us(&kids), switches(&kids), served);
	fflush(stdout);
}

static int serve(int port)
{
	struct sigaction sa = {.sa_handler = on_usr1}; /* no SA_RESTART: accept returns */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	int lis = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(lis, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = loopback(port);
	if (lis < 0 || bind(lis, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lis, 128) != 0) {
		perror("forkconn serve");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	long served = 0;
	for (;;) {
		if (report_asked) {
			report_asked = 0;
			report(served);
		}
		int c = accept(lis, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			perror("forkconn accept");
			return 1;
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(lis);
			int rc = echo(c);
			close(c);
			exit(rc);
		}
		close(c);
		if (pid > 0)
			served++;
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
	}
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;
	return (a > b) - (a < b);
}

static int connect_loop(int port, int n)
{
	double *took = calloc((size_t)n, sizeof(*took));
	if (!took || n <= 0)
		return 1;
	struct sockaddr_in a = loopback(port);
	char b[MSG];
	memset(b, 'x', sizeof(b));
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	double t0 = now_s();
	for (int i = 0; i < n; i++) {
		double s = now_s();
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
		    write(fd, b, MSG) != MSG) {
			perror("forkconn connect");
			return 1;
		}
		size_t got = 0;
		while (got < MSG) {
			ssize_t k = read(fd, b + got, MSG - got);
			if (k <= 0) {
				fprintf(stderr, "forkconn: connection %d ended early\n", i);
				return 1;
			}
			got += (size_t)k;
		}
		close(fd);
		took[i] = now_s() - s;
	}
	double total = now_s() - t0;
	getrusage(RUSAGE_SELF, &r1);
	qsort(took, (size_t)n, sizeof(*took), cmp_double);
	printf("conns %d per_s %.0f p50_us %.0f p99_us %.0f client_cpu_us %.0f client_switches %.1f\n",
	       n, n / total, took[n / 2] * 1e6, took[(n * 99) / 100] * 1e6,
	       (double)(cpu_us(&r1) - cpu_us(&r0)) / n,
	       (double)(switches(&r1) - switches(&r0)) / n);
	free(took);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "serve") == 0)
		return serve(atoi(argv[2]));
	if (argc == 4 && strcmp(argv[1], "connect") == 0)
		return connect_loop(atoi(argv[2]), atoi(argv[3]));
	fprintf(stderr, "usage: forkconn serve PORT | forkconn connect PORT N\n");
	return 2;
}
