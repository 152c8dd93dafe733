/*
 * tcpcat HOST PORT: a minimal netcat for the integration tests (the machine
 * has none): connects over TCP, copies stdin to the connection (then shuts
 * down its write side) and the connection to stdout until the peer's EOF.
 * Exits 0 at EOF, 1 with the error's name on stderr otherwise.
 */
#include "autoconfig.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int tcpcat_connect(const char *host, const char *port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		fprintf(stderr, "tcpcat: %s:%s: %s\n", host, port, gai_strerror(rc));
		return -1;
	}
	int fd = -1;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
			break;
		fprintf(stderr, "tcpcat: connect: %s\n", strerrorname_np(errno));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t w = write(fd, buf, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: tcpcat HOST PORT\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	int fd = tcpcat_connect(argv[1], argv[2]);
	if (fd < 0)
		return 1;
	bool in_open = true;
	char buf[65536];
	for (;;) {
		struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN},
					{.fd = in_open ? STDIN_FILENO : -1, .events = POLLIN}};
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents) {
			ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
			if (n > 0 && write_all(fd, buf, (size_t)n) == 0)
				continue;
			if (n > 0)
				break;
			in_open = false;
			shutdown(fd, SHUT_WR);
		}
		if (pfd[0].revents) {
			ssize_t n = read(fd, buf, sizeof(buf));
			if (n == 0)
				return 0;
			if (n < 0 || write_all(STDOUT_FILENO, buf, (size_t)n))
				break;
		}
	}
	fprintf(stderr, "tcpcat: %s\n", strerrorname_np(errno));
	return 1;
}
