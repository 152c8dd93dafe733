/*
 * A socket's error queue: with SO_ZEROCOPY, each send with MSG_ZEROCOPY is
 * answered there (a run of them as one notice with their numbers as a
 * range, SO_EE_CODE_ZEROCOPY_COPIED where the data was copied, as on
 * loopback), POLLERR while a notice waits, and a read of the queue never
 * takes the stream's bytes; an empty queue says EAGAIN.
 */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* recvmsg(MSG_ERRQUEUE): the return, and the notice's fields when one came. */
static void expect_notice(struct peer *p, int fd, unsigned lo, unsigned hi)
{
	char data[8], ctl[128];
	struct iovec v = {data, sizeof(data)};
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl,
			   .msg_controllen = sizeof(ctl)};
	ssize_t n = recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT);
	expect_rc(p, "errqueue_read", n, 0, 0);
	expect_true(p, "errqueue_flag", (m.msg_flags & MSG_ERRQUEUE) != 0);
	struct cmsghdr *c = n == 0 ? CMSG_FIRSTHDR(&m) : NULL;
	if (!c)
		die(p, "no control message with the notice");
	expect_int(p, "cmsg_level", c->cmsg_level, SOL_IP);
	expect_int(p, "cmsg_type", c->cmsg_type, IP_RECVERR);
	expect_int(p, "cmsg_len", (long)c->cmsg_len,
		   (long)CMSG_LEN(sizeof(struct sock_extended_err) + sizeof(struct sockaddr_in)));
	expect_int(p, "controllen", (long)m.msg_controllen,
		   (long)CMSG_SPACE(sizeof(struct sock_extended_err) + sizeof(struct sockaddr_in)));
	struct sock_extended_err ee;
	memcpy(&ee, CMSG_DATA(c), sizeof(ee));
	expect_int(p, "ee_errno", ee.ee_errno, 0);
	expect_int(p, "ee_origin", ee.ee_origin, SO_EE_ORIGIN_ZEROCOPY);
	expect_int(p, "ee_code", ee.ee_code, SO_EE_CODE_ZEROCOPY_COPIED);
	expect_int(p, "range_lo", ee.ee_info, lo);
	expect_int(p, "range_hi", ee.ee_data, hi);
}

static short poll_now(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLOUT};
	return poll(&pfd, 1, 0) > 0 ? pfd.revents : 0;
}

static void zerocopy_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char c;
	sync_send(p);
	sync_wait(p); /* "hello", "x" with MSG_ZEROCOPY, "y" plainly */
	expect_true(p, "pollin", wait_for(fd, POLLIN) & POLLIN);
	/* The receiver's queue is empty; its bytes stay where they are. */
	expect_rc(p, "errqueue_empty", recv(fd, &c, 1, MSG_ERRQUEUE | MSG_DONTWAIT), -1, EAGAIN);
	char buf[16] = {0};
	size_t got = read_full(fd, buf, 7);
	expect_int(p, "bytes", (long)got, 7);
	expect_str(p, "data", buf, "helloxy");
	sync_send(p);
	expect_rc(p, "eof", read(fd, &c, 1), 0, 0);
	close(fd);
}

static void zerocopy_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	char c;
	expect_rc(p, "no_notice_yet", recv(fd, &c, 1, MSG_ERRQUEUE | MSG_DONTWAIT), -1, EAGAIN);
	/* Without SO_ZEROCOPY the flag is ignored: no notice. */
	expect_rc(p, "send_zc_off", send(fd, "", 0, MSG_ZEROCOPY), 0, 0);
	expect_rc(p, "set_zerocopy", setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &(int){1}, sizeof(int)),
		  0, 0);
	int on = 0;
	socklen_t len = sizeof(on);
	getsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &on, &len);
	expect_int(p, "get_zerocopy", on, 1);
	sync_wait(p);
	expect_rc(p, "send_zc", send(fd, "hello", 5, MSG_ZEROCOPY), 5, 0);
	expect_rc(p, "send_zc_2", send(fd, "x", 1, MSG_ZEROCOPY), 1, 0);
	expect_rc(p, "send", send(fd, "y", 1, 0), 1, 0);
	sync_send(p);
	/* Both done, in one notice; POLLERR until it is read. */
	expect_true(p, "pollerr", wait_for(fd, POLLERR) & POLLERR);
	sleep_ms(QUIET_MS);
	expect_int(p, "poll_out_err", poll_now(fd), POLLOUT | POLLERR);
	expect_notice(p, fd, 0, 1);
	expect_int(p, "poll_out", poll_now(fd), POLLOUT);
	expect_rc(p, "errqueue_drained", recv(fd, &c, 1, MSG_ERRQUEUE | MSG_DONTWAIT), -1, EAGAIN);
	sync_wait(p);
	close(fd);
}

const struct scenario scen_errqueue[] = {
	{"errqueue_zerocopy", zerocopy_server, zerocopy_client, false},
	{NULL, NULL, NULL, false},
};
