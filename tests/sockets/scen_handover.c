/* Scenarios: epoll registrations that outlive a socket's change of owner. */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A connection made with raw system calls: no interposer sees it, so it
 * reaches the listener through the kernel, as a plain program's would. */
static int kernel_connect(struct peer *p, uint16_t port)
{
	int fd = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die(p, "raw socket");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	while (syscall(SYS_connect, fd, (struct sockaddr *)&a, sizeof(a))) {
		if (errno != EINTR)
			die(p, "raw connect");
	}
	return fd;
}

/* ---- epoll_oneshot_listen: a one-shot item that fired before listen() stays
 * disarmed once the socket listens (ferry then also watches it in the kernel),
 * until EPOLL_CTL_MOD re-arms it. ------------------------------------------ */

static void oslisten_server(struct peer *p)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		die(p, "socket");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (bind(s, (struct sockaddr *)&a, sizeof(a)))
		die(p, "bind");
	int ep = epoll_create1(0);
	struct epoll_event add = {.events = EPOLLIN | EPOLLONESHOT, .data.u32 = 1};
	expect_rc(p, "add", epoll_ctl(ep, EPOLL_CTL_ADD, s, &add), 0, 0);
	struct epoll_event ev[2] = {{0}};
	/* An unconnected socket reports EPOLLHUP, which fires the item. */
	expect_rc(p, "fired", ep_wait(ep, ev, 2, WAIT_MS), 1, 0);
	expect_int(p, "fired_events", ev[0].events, EPOLLHUP);
	expect_rc(p, "listen", listen(s, 8), 0, 0);
	uint16_t port = sock_port(p, s);
	sync_send_data(p, &port, sizeof(port));
	sync_wait(p); /* a connection is queued on s */
	expect_rc(p, "disarmed", ep_wait(ep, ev, 2, QUIET_MS), 0, 0);
	struct epoll_event re = {.events = EPOLLIN | EPOLLONESHOT, .data.u32 = 2};
	expect_rc(p, "rearm", epoll_ctl(ep, EPOLL_CTL_MOD, s, &re), 0, 0);
	expect_rc(p, "after_rearm", ep_wait(ep, ev, 2, WAIT_MS), 1, 0);
	expect_int(p, "rearm_events", ev[0].events, EPOLLIN);
	expect_int(p, "rearm_tag", ev[0].data.u32, 2);
	expect_rc(p, "disarmed_again", ep_wait(ep, ev, 2, QUIET_MS), 0, 0);
	/* The stream the checks want carried by ferry, on the harness's listener. */
	int fd = tcp_accept(p, p->lfd);
	sync_send(p);
	close(fd);
	close(ep);
	close(s); /* the raw connection is never accepted */
}

static void oslisten_client(struct peer *p)
{
	/* Neither connected nor listening: writable and hung up, at once. */
	int u = socket(AF_INET, SOCK_STREAM, 0);
	struct pollfd pf = {.fd = u, .events = POLLIN | POLLOUT};
	expect_rc(p, "unconnected_poll", poll(&pf, 1, 0), 1, 0);
	expect_int(p, "unconnected_revents", pf.revents, POLLOUT | POLLHUP);
	close(u);
	int fd = tcp_connect(p, p->port);
	uint16_t port;
	sync_recv_data(p, &port, sizeof(port));
	int k = kernel_connect(p, port);
	sync_send(p);
	sync_wait(p);
	close(k);
	close(fd);
}

const struct scenario scen_handover[] = {
	{"epoll_oneshot_listen", oslisten_server, oslisten_client, false},
	{NULL, NULL, NULL, false},
};
