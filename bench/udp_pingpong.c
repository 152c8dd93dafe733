/*
 * The physical baseline: a bare busy-polled UDP ping-pong of small messages,
 * with nothing of ferry in it, so ferry's latency has something to be
 * measured against.
 *
 *   udp_pingpong [-n RTTS] [--warmup W] [--size B]    server forked, over loopback
 *   udp_pingpong --server PORT                         echo until told to stop
 *   udp_pingpong --connect ADDR:PORT [-n ...] [--stop]  client against a remote server
 *                                                      (--stop ends the server afterwards)
 *
 * Prints one JSON line: {"test":"udp_pingpong","size":32,"p50_us":..,"p99_us":..,
 * "p999_us":..,"rtts":N,"lost":L}. A reply that does not come within a second
 * counts as lost and is left out of the percentiles.
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/pin.h"

#define MAX_SIZE 65507
#define LOSS_TIMEOUT_NS 1000000000ull

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "udp_pingpong: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* Dual-stack [::]:port when the host has IPv6, else 0.0.0.0:port. */
static int bind_any(uint16_t port)
{
	int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	if (fd >= 0) {
		int off = 0;
		struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port),
					 .sin6_addr = IN6ADDR_ANY_INIT};
		if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) == 0 &&
		    bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
			return fd;
		close(fd);
	}
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		die("socket");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_ANY)};
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("bind");
	return fd;
}

/* Echoes every datagram to its sender, busy-polling; a 0-byte one means stop. */
static void serve(int fd)
{
	static uint8_t buf[MAX_SIZE];
	for (;;) {
		struct sockaddr_storage from;
		socklen_t fromlen = sizeof(from);
		ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &fromlen);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				continue;
			die("recvfrom");
		}
		if (n == 0)
			return;
		/* A full socket drops the echo: the client's loss timer covers it. */
		sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, fromlen);
	}
}

/* Splits "host:port" or "[v6]:port" and resolves it. */
static void resolve(const char *spec, struct sockaddr_storage *out, socklen_t *outlen)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host)) {
		fprintf(stderr, "udp_pingpong: --connect wants ADDR:PORT, got %s\n", spec);
		exit(2);
	}
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = '\0';
	char *h = host;
	if (h[0] == '[' && h[strlen(h) - 1] == ']') {
		h[strlen(h) - 1] = '\0';
		h++;
	}
	struct addrinfo hints = {.ai_socktype = SOCK_DGRAM, .ai_flags = AI_V4MAPPED | AI_ADDRCONFIG};
	struct addrinfo *ai;
	int err = getaddrinfo(h, colon + 1, &hints, &ai);
	if (err) {
		fprintf(stderr, "udp_pingpong: %s: %s\n", spec, gai_strerror(err));
		exit(2);
	}
	memcpy(out, ai->ai_addr, ai->ai_addrlen);
	*outlen = ai->ai_addrlen;
	freeaddrinfo(ai);
}

/* Sends one ping and spins for its echo; returns the round trip in ns, or 0 if lost. */
static uint64_t ping(int fd, uint8_t *msg, uint8_t *reply, size_t size, uint64_t seq)
{
	memcpy(msg, &seq, sizeof(seq));
	uint64_t t0 = now_ns();
	if (send(fd, msg, size, 0) < 0 && errno != EAGAIN && errno != ENOBUFS)
		die("send");
	for (;;) {
		ssize_t n = recv(fd, reply, size, 0);
		uint64_t t = now_ns();
		if (n == (ssize_t)size) {
			uint64_t got;
			memcpy(&got, reply, sizeof(got));
			if (got == seq)
				return t - t0 ? t - t0 : 1;
			continue; /* a late echo of a ping already counted lost */
		}
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
		    errno != ECONNREFUSED)
			die("recv");
		if (t - t0 > LOSS_TIMEOUT_NS)
			return 0;
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted samples, in microseconds. */
static double pct_us(const uint64_t *sorted, size_t n, double p)
{
	size_t rank = (size_t)(p * (double)n + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return (double)sorted[rank - 1] / 1000.0;
}

static int run_client(const struct sockaddr_storage *to, socklen_t tolen, size_t size,
		      unsigned warmup, unsigned rtts)
{
	int fd = socket(to->ss_family, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		die("socket");
	/* connect() lets send/recv skip the address and filters stray senders. */
	if (connect(fd, (const struct sockaddr *)to, tolen) < 0)
		die("connect");
	uint8_t *msg = calloc(1, size), *reply = calloc(1, size);
	uint64_t *samples = calloc(rtts ? rtts : 1, sizeof(uint64_t));
	if (!msg || !reply || !samples)
		die("calloc");
	uint64_t seq = 0;
	for (unsigned i = 0; i < warmup; i++)
		ping(fd, msg, reply, size, ++seq);
	size_t n = 0;
	unsigned lost = 0;
	for (unsigned i = 0; i < rtts; i++) {
		uint64_t rtt = ping(fd, msg, reply, size, ++seq);
		if (rtt)
			samples[n++] = rtt;
		else
			lost++;
	}
	qsort(samples, n, sizeof(samples[0]), cmp_u64);
	if (n == 0) {
		fprintf(stderr, "udp_pingpong: no echo came back\n");
		return 1;
	}
	printf("{\"test\":\"udp_pingpong\",\"size\":%zu,\"p50_us\":%.2f,\"p99_us\":%.2f,"
	       "\"p999_us\":%.2f,\"rtts\":%zu,\"lost\":%u}\n",
	       size, pct_us(samples, n, 0.50), pct_us(samples, n, 0.99), pct_us(samples, n, 0.999),
	       n, lost);
	fflush(stdout);
	close(fd);
	free(msg);
	free(reply);
	free(samples);
	return 0;
}

static void stop_server(const struct sockaddr_storage *to, socklen_t tolen)
{
	int fd = socket(to->ss_family, SOCK_DGRAM, 0);
	if (fd < 0)
		return;
	for (int i = 0; i < 3; i++)
		sendto(fd, "", 0, 0, (const struct sockaddr *)to, tolen);
	close(fd);
}

static void usage(void)
{
	fprintf(stderr, "usage: udp_pingpong [-n RTTS] [--warmup W] [--size B]\n"
			"       udp_pingpong --server PORT\n"
			"       udp_pingpong --connect ADDR:PORT [-n RTTS] [--warmup W] [--size B] [--stop]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	unsigned rtts = 100000, warmup = 10000;
	size_t size = 32;
	long server_port = -1;
	const char *connect_to = NULL;
	bool stop = false;
	static const struct option opts[] = {
		{"rtts", required_argument, NULL, 'n'},  {"warmup", required_argument, NULL, 'w'},
		{"size", required_argument, NULL, 's'},  {"server", required_argument, NULL, 'S'},
		{"connect", required_argument, NULL, 'c'}, {"stop", no_argument, NULL, 'x'},
		{"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
	};
	for (int c; (c = getopt_long(argc, argv, "n:w:s:h", opts, NULL)) != -1;) {
		switch (c) {
		case 'n': rtts = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'w': warmup = (unsigned)strtoul(optarg, NULL, 10); break;
		case 's': size = strtoul(optarg, NULL, 10); break;
		case 'S': server_port = strtol(optarg, NULL, 10); break;
		case 'c': connect_to = optarg; break;
		case 'x': stop = true; break;
		default: usage();
		}
	}
	if (optind != argc || rtts == 0 || size < sizeof(uint64_t) || size > MAX_SIZE ||
	    (server_port >= 0 && connect_to) || server_port > 65535)
		usage();

	if (server_port >= 0) {
		serve(bind_any((uint16_t)server_port));
		return 0;
	}
	struct sockaddr_storage to;
	socklen_t tolen;
	if (connect_to) {
		resolve(connect_to, &to, &tolen);
		int rc = run_client(&to, tolen, size, warmup, rtts);
		if (stop)
			stop_server(&to, tolen);
		return rc;
	}

	/* One host: bind the server before forking, so the client never races it. */
	int sfd = bind_any(0);
	struct sockaddr_storage bound;
	socklen_t blen = sizeof(bound);
	if (getsockname(sfd, (struct sockaddr *)&bound, &blen) < 0)
		die("getsockname");
	uint16_t port = bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
						    : ((struct sockaddr_in *)&bound)->sin_port;
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_port = port,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	memcpy(&to, &lo, sizeof(lo));
	tolen = sizeof(lo);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		bench_pin(0);
		serve(sfd);
		_exit(0);
	}
	bench_pin(1);
	close(sfd);
	int rc = run_client(&to, tolen, size, warmup, rtts);
	stop_server(&to, tolen);
	/* The stop datagram could be lost; the server is ours to end either way. */
	int status;
	for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(10000);
	if (waitpid(pid, &status, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	return rc;
}
