/* Scenarios: sockets that change owner: epoll registrations that outlive the
 * change, and connections whose peer was gone before it. */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
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

/* ---- fork_after_peer_close, fork_after_peer_exit, pass_after_peer_close:
 * the peer sent its bytes and closed its socket (or exited) before the
 * process that accepted the connection gave it to another (a fork child,
 * or a worker it passed it to: a fire-and-forget client of postgres or of
 * a node cluster, a health check). The new holder reads the bytes and then
 * EOF, as from the kernel's socket, and its write draws the peer's reset:
 * the next one fails with EPIPE. fork_after_peer_reset and
 * pass_after_peer_reset: the peer reset it instead; the new holder reads
 * the reset. ------------------------------------------------------------ */

static void peer_done_read(struct peer *p, int fd)
{
	char buf[16] = {0};
	expect_rc(p, "new_holder_read", read_full(fd, buf, 5), 5, 0);
	expect_str(p, "new_holder_bytes", buf, "hello");
	expect_rc(p, "new_holder_eof", read(fd, buf, 1), 0, 0);
	expect_rc(p, "new_holder_send", send(fd, "x", 1, MSG_NOSIGNAL), 1, 0);
	long rc = 0;
	for (int i = 0; i < 250 && rc >= 0; i++) {
		rc = send(fd, "x", 1, MSG_NOSIGNAL);
		if (rc >= 0)
			sleep_ms(20);
	}
	expect_rc(p, "new_holder_send_after_reset", rc, -1, EPIPE);
	close(fd);
}

static void wait_child(struct peer *p, pid_t pid)
{
	int st = -1;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	expect_int(p, "new_holder_exit", st, 0);
}

/* The peer reset the connection instead (SO_LINGER 0): the new holder reads
 * the reset once, then EOF. */
static void peer_reset_read(struct peer *p, int fd)
{
	char c;
	expect_rc(p, "new_holder_read", read(fd, &c, 1), -1, ECONNRESET);
	expect_rc(p, "new_holder_read_again", read(fd, &c, 1), 0, 0);
	close(fd);
}

static bool reset_scenario(const struct peer *p)
{
	return strstr(p->scenario, "reset") != NULL;
}

static void new_holder(struct peer *p, int fd)
{
	if (reset_scenario(p))
		peer_reset_read(p, fd);
	else
		peer_done_read(p, fd);
}

/* A fork child reads fd, its parent's copy closed at once (as a postmaster
 * closes its copy). */
static void fork_new_holder(struct peer *p, int fd)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die(p, "fork");
	if (pid == 0) {
		new_holder(p, fd);
		fflush(stdout);
		_exit(p->failures ? 1 : 0);
	}
	close(fd);
	wait_child(p, pid);
}

/* The accepted connection, once the peer's bytes and FIN (or its reset)
 * are in. */
static int accept_peer_done(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	sync_wait(p); /* the peer sent its bytes and closed */
	if (reset_scenario(p))
		expect_true(p, "reset_in", (wait_for(fd, POLLIN) & POLLERR) != 0);
	else
		expect_true(p, "fin_in", (wait_for(fd, POLLRDHUP) & POLLRDHUP) != 0);
	return fd;
}

static void fork_after_peer_server(struct peer *p)
{
	int fd = accept_peer_done(p);
	fork_new_holder(p, fd);
	sync_send(p);
}

static void peer_close_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	expect_rc(p, "send", send(fd, "hello", 5, 0), 5, 0);
	close(fd);
	sync_send(p);
	sync_wait(p); /* alive, its socket closed, until the reader is done */
}

static void peer_reset_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	struct linger l = {.l_onoff = 1, .l_linger = 0};
	expect_rc(p, "linger0", setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0, 0);
	close(fd);
	sync_send(p);
	sync_wait(p);
}

static void peer_exit_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	expect_rc(p, "send", send(fd, "hello", 5, 0), 5, 0);
	close(fd);
	pid_t me = getpid();
	sync_send_data(p, &me, sizeof(me));
}

/* As fork_after_peer_server, once the peer's process has exited. */
static void fork_after_exit_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	pid_t peer;
	sync_recv_data(p, &peer, sizeof(peer));
	int pidfd = (int)syscall(SYS_pidfd_open, peer, 0);
	if (pidfd < 0)
		die(p, "pidfd_open");
	struct pollfd gone = {.fd = pidfd, .events = POLLIN};
	expect_rc(p, "peer_exited", poll(&gone, 1, WAIT_MS), 1, 0);
	close(pidfd);
	expect_true(p, "fin_in", (wait_for(fd, POLLRDHUP) & POLLRDHUP) != 0);
	fork_new_holder(p, fd);
}

/* The peer's process was killed after it sent: its socket closed as at an
 * exit (a FIN, nothing of ours left unread), before the accepting process
 * forked the child that reads. The peer's own connection is made in a child
 * of the client role, which lives on and then connects once more itself. */
static void fork_after_kill_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	sync_wait(p); /* the peer's process is dead */
	expect_true(p, "fin_in", (wait_for(fd, POLLRDHUP) & POLLRDHUP) != 0);
	fork_new_holder(p, fd);
	int last = tcp_accept(p, p->lfd);
	char buf[4] = {0};
	expect_rc(p, "last_read", read_full(last, buf, 3), 3, 0);
	close(last);
	sync_send(p);
}

static void peer_killed_client(struct peer *p)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die(p, "fork");
	if (pid == 0) {
		int fd = tcp_connect(p, p->port);
		if (send(fd, "hello", 5, 0) != 5)
			_exit(1);
		/* A wait, so the bytes have left the process (ferry(7): a dead
		 * peer's bytes that had not are lost with it); a look at
		 * nothing for the kernel. */
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		poll(&pf, 1, 0);
		raise(SIGKILL);
	}
	int st = -1;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	expect_true(p, "peer_killed", WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	sync_send(p);
	int fd = tcp_connect(p, p->port);
	expect_rc(p, "last_send", send(fd, "bye", 3, 0), 3, 0);
	close(fd);
	sync_wait(p);
}

/* A worker forked before the connection came takes it over a unix socket
 * (SCM_RIGHTS); the acceptor closes its copy once it is sent. */
static void pass_after_peer_server(struct peer *p)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die(p, "socketpair");
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die(p, "fork");
	if (pid == 0) {
		close(sv[0]);
		char tag;
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec v = {.iov_base = &tag, .iov_len = 1};
		struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf,
				   .msg_controllen = sizeof(u.buf)};
		int fd = -1;
		if (recvmsg(sv[1], &m, 0) == 1 && CMSG_FIRSTHDR(&m))
			memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof(fd));
		if (fd < 0)
			die(p, "recvmsg");
		new_holder(p, fd);
		fflush(stdout);
		_exit(p->failures ? 1 : 0);
	}
	close(sv[1]);
	int fd = accept_peer_done(p);
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u = {{0}};
	struct iovec v = {.iov_base = "c", .iov_len = 1};
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = u.buf,
			   .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(fd));
	if (sendmsg(sv[0], &m, 0) != 1)
		die(p, "sendmsg");
	close(fd);
	wait_child(p, pid);
	close(sv[0]);
	sync_send(p);
}

const struct scenario scen_handover[] = {
	{"epoll_oneshot_listen", oslisten_server, oslisten_client, false},
	{"fork_after_peer_close", fork_after_peer_server, peer_close_client, false},
	{"fork_after_peer_exit", fork_after_exit_server, peer_exit_client, false},
	{"pass_after_peer_close", pass_after_peer_server, peer_close_client, false},
	{"fork_after_peer_killed", fork_after_kill_server, peer_killed_client, false},
	{"fork_after_peer_reset", fork_after_peer_server, peer_reset_client, false},
	{"pass_after_peer_reset", pass_after_peer_server, peer_reset_client, false},
	{NULL, NULL, NULL, false},
};
