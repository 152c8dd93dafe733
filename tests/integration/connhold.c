/*
 * connhold PORT N: keeps N connections to a redis server on 127.0.0.1:PORT
 * busy with PING round trips (one thread, non-blocking, poll), and reports
 * when each one stops working: the kill test uses it to show that every
 * connection sees the server's death, and when.
 *
 * Prints "ready" once every connection has had a reply, then, per
 * connection, "conn I end KIND T" where KIND is EOF or an errno name and T
 * the CLOCK_REALTIME time in ns; exits 0 when all N have ended.
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { CONN_MAX = 256 };

struct conn {
	int fd;
	unsigned replies;
	bool awaiting; /* a PING is out */
	bool ended;
};

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void conn_end(struct conn *c, int i, const char *kind)
{
	printf("conn %d end %s %lld\n", i, kind, now_ns());
	fflush(stdout);
	c->ended = true;
	close(c->fd);
	c->fd = -1;
}

static void conn_ping(struct conn *c, int i)
{
	static const char ping[] = "*1\r\n$4\r\nPING\r\n";
	ssize_t w = send(c->fd, ping, sizeof(ping) - 1, MSG_NOSIGNAL);
	if (w == (ssize_t)sizeof(ping) - 1)
		c->awaiting = true;
	else if (w < 0 && errno != EAGAIN)
		conn_end(c, i, strerrorname_np(errno));
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: connhold PORT N\n");
		return 2;
	}
	int n = atoi(argv[2]);
	if (n < 1 || n > CONN_MAX)
		return 2;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[1])),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	static struct conn conns[CONN_MAX];
	for (int i = 0; i < n; i++) {
		conns[i].fd = socket(AF_INET, SOCK_STREAM, 0);
		if (conns[i].fd < 0 || connect(conns[i].fd, (struct sockaddr *)&a, sizeof(a))) {
			fprintf(stderr, "connhold: connect %d: %s\n", i, strerror(errno));
			return 1;
		}
		fcntl(conns[i].fd, F_SETFL, O_NONBLOCK);
		conn_ping(&conns[i], i);
	}
	bool ready = false;
	int ended = 0;
	while (ended < n) {
		ended = 0;
		for (int i = 0; i < n; i++)
			ended += conns[i].ended;
		if (ended == n)
			break;
		struct pollfd pfd[CONN_MAX];
		for (int i = 0; i < n; i++)
			pfd[i] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN | POLLRDHUP};
		if (poll(pfd, (nfds_t)n, -1) < 0 && errno != EINTR)
			return 1;
		for (int i = 0; i < n; i++) {
			struct conn *c = &conns[i];
			if (c->ended || !pfd[i].revents)
				continue;
			char buf[4096];
			ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
			if (r == 0) {
				conn_end(c, i, "EOF");
			} else if (r < 0 && errno != EAGAIN) {
				conn_end(c, i, strerrorname_np(errno));
			} else if (r > 0 && memchr(buf, '\n', (size_t)r)) {
				c->replies++;
				c->awaiting = false;
				conn_ping(c, i);
			}
		}
		if (!ready) {
			ready = true;
			for (int i = 0; i < n; i++)
				ready = ready && conns[i].replies > 0;
			if (ready) {
				printf("ready\n");
				fflush(stdout);
			}
		}
	}
	return 0;
}
