/* Scenarios: names, options, fcntl/ioctl flags, dup'ed fds, threads and fork. */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- names: getsockname/getpeername agree across the two ends ------------------ */

struct name_pair {
	struct sockaddr_storage self, peer;
	socklen_t self_len, peer_len;
};

static void names_get(struct peer *p, int fd, struct name_pair *np)
{
	np->self_len = np->peer_len = sizeof(struct sockaddr_storage);
	memset(&np->self, 0, sizeof(np->self));
	memset(&np->peer, 0, sizeof(np->peer));
	expect_rc(p, "getsockname", getsockname(fd, (struct sockaddr *)&np->self, &np->self_len),
		  0, 0);
	expect_rc(p, "getpeername", getpeername(fd, (struct sockaddr *)&np->peer, &np->peer_len),
		  0, 0);
}

static bool same_addr(const struct sockaddr_storage *a, socklen_t alen,
		      const struct sockaddr_storage *b, socklen_t blen)
{
	return alen == blen && !memcmp(a, b, alen);
}

static void names_check(struct peer *p, const struct name_pair *mine, const struct name_pair *theirs)
{
	expect_true(p, "my_name_is_their_peer",
		    same_addr(&mine->self, mine->self_len, &theirs->peer, theirs->peer_len));
	expect_true(p, "my_peer_is_their_name",
		    same_addr(&mine->peer, mine->peer_len, &theirs->self, theirs->self_len));
	expect_int(p, "family", mine->self.ss_family, AF_INET);
	expect_int(p, "name_len", mine->self_len, sizeof(struct sockaddr_in));
}

static void names_server(struct peer *p)
{
	struct sockaddr_in from;
	socklen_t flen = sizeof(from);
	int fd = accept(p->lfd, (struct sockaddr *)&from, &flen);
	if (fd < 0)
		die(p, "accept");
	struct name_pair mine, theirs;
	names_get(p, fd, &mine);
	sync_send_data(p, &mine, sizeof(mine));
	sync_recv_data(p, &theirs, sizeof(theirs));
	names_check(p, &mine, &theirs);
	expect_true(p, "accept_addr_is_peer",
		    same_addr((struct sockaddr_storage *)&from, flen, &mine.peer, mine.peer_len));
	expect_true(p, "local_port_is_listener",
		    ntohs(((struct sockaddr_in *)&mine.self)->sin_port) == p->port);
	struct sockaddr_in la;
	socklen_t llen = sizeof(la);
	expect_rc(p, "listener_getpeername", getpeername(p->lfd, (struct sockaddr *)&la, &llen),
		  -1, ENOTCONN);
	sync_wait(p);
	close(fd);
}

static void names_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	struct name_pair mine, theirs;
	names_get(p, fd, &mine);
	sync_recv_data(p, &theirs, sizeof(theirs));
	sync_send_data(p, &mine, sizeof(mine));
	names_check(p, &mine, &theirs);
	expect_true(p, "peer_port", ntohs(((struct sockaddr_in *)&mine.peer)->sin_port) == p->port);
	/* A short buffer is filled as far as it goes; the length says the full size. */
	char small[4];
	socklen_t slen = sizeof(small);
	expect_rc(p, "getpeername_short", getpeername(fd, (struct sockaddr *)small, &slen), 0, 0);
	expect_int(p, "getpeername_short_len", slen, sizeof(struct sockaddr_in));
	expect_true(p, "getpeername_short_bytes", !memcmp(small, &mine.peer, sizeof(small)));
	int lone = socket(AF_INET, SOCK_STREAM, 0);
	slen = sizeof(small);
	expect_rc(p, "unconnected_getpeername", getpeername(lone, (struct sockaddr *)small, &slen),
		  -1, ENOTCONN);
	close(lone);
	sync_send(p);
	close(fd);
}

/* ---- ipv6: the same over ::1 ------------------------------------------------------ */

static void v6_server(struct peer *p)
{
	int l = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4))
		die(p, "v6 listener");
	socklen_t alen = sizeof(a);
	getsockname(l, (struct sockaddr *)&a, &alen);
	sync_send_data(p, &a.sin6_port, sizeof(a.sin6_port));
	int fd = tcp_accept(p, l);
	struct sockaddr_in6 peer;
	socklen_t plen = sizeof(peer);
	getpeername(fd, (struct sockaddr *)&peer, &plen);
	expect_int(p, "peer_family", peer.sin6_family, AF_INET6);
	expect_int(p, "peer_len", plen, sizeof(peer));
	sync_send_data(p, &peer.sin6_port, sizeof(peer.sin6_port));
	char buf[8];
	expect_rc(p, "read", read_full(fd, buf, 4), 4, 0);
	expect_true(p, "bytes", !memcmp(buf, "six!", 4));
	close(fd);
	close(l);
}

static void v6_client(struct peer *p)
{
	struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	sync_recv_data(p, &a.sin6_port, sizeof(a.sin6_port));
	int fd = socket(AF_INET6, SOCK_STREAM, 0);
	expect_rc(p, "connect", connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, 0);
	struct sockaddr_in6 self;
	socklen_t slen = sizeof(self);
	getsockname(fd, (struct sockaddr *)&self, &slen);
	in_port_t seen;
	sync_recv_data(p, &seen, sizeof(seen));
	expect_true(p, "server_sees_my_port", seen == self.sin6_port);
	expect_true(p, "loopback", IN6_IS_ADDR_LOOPBACK(&self.sin6_addr));
	expect_rc(p, "send", send(fd, "six!", 4, 0), 4, 0);
	close(fd);
}

/* ---- wildcard_listeners: 0.0.0.0 and dual-stack [::] listeners, names as dialled -- */

static int wild_listener(struct peer *p, int family)
{
	int l = socket(family, SOCK_STREAM, 0);
	if (l < 0)
		die(p, "socket");
	if (family == AF_INET6) {
		setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &(int){0}, sizeof(int));
		struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
		if (bind(l, (struct sockaddr *)&a, sizeof(a)))
			die(p, "bind [::]");
	} else {
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
		if (bind(l, (struct sockaddr *)&a, sizeof(a)))
			die(p, "bind 0.0.0.0");
	}
	if (listen(l, 8))
		die(p, "listen");
	return l;
}

static void wild_server(struct peer *p)
{
	int l4 = wild_listener(p, AF_INET), l6 = wild_listener(p, AF_INET6);
	uint16_t ports[2] = {sock_port(p, l4), 0};
	struct sockaddr_in6 a6;
	socklen_t len = sizeof(a6);
	getsockname(l6, (struct sockaddr *)&a6, &len);
	ports[1] = ntohs(a6.sin6_port);
	sync_send_data(p, ports, sizeof(ports));

	int fd = tcp_accept(p, l4);
	struct sockaddr_in self4;
	len = sizeof(self4);
	getsockname(fd, (struct sockaddr *)&self4, &len);
	expect_str(p, "any4_local_addr", inet_ntoa(self4.sin_addr), "127.0.0.2");
	close(fd);

	struct sockaddr_in6 peer6, self6;
	socklen_t plen = sizeof(peer6);
	fd = accept(l6, (struct sockaddr *)&peer6, &plen);
	if (fd < 0)
		die(p, "accept [::]");
	expect_int(p, "dual_peer_family", peer6.sin6_family, AF_INET6);
	expect_true(p, "dual_peer_v4mapped", IN6_IS_ADDR_V4MAPPED(&peer6.sin6_addr));
	char text[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, &peer6.sin6_addr, text, sizeof(text));
	expect_str(p, "dual_peer_addr", text, "::ffff:127.0.0.1");
	len = sizeof(self6);
	getsockname(fd, (struct sockaddr *)&self6, &len);
	inet_ntop(AF_INET6, &self6.sin6_addr, text, sizeof(text));
	expect_str(p, "dual_local_addr", text, "::ffff:127.0.0.1");
	expect_true(p, "dual_local_port", ntohs(self6.sin6_port) == ports[1]);
	char buf[4];
	expect_rc(p, "dual_read", read_full(fd, buf, 4), 4, 0);
	close(fd);
	close(l4);
	close(l6);
}

static void wild_client(struct peer *p)
{
	uint16_t ports[2];
	sync_recv_data(p, ports, sizeof(ports));
	/* Any loopback address reaches a 0.0.0.0 listener. */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(ports[0])};
	inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
	expect_rc(p, "connect_127_0_0_2", connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, 0);
	struct sockaddr_in peer;
	socklen_t len = sizeof(peer);
	getpeername(fd, (struct sockaddr *)&peer, &len);
	expect_str(p, "any4_peer_addr", inet_ntoa(peer.sin_addr), "127.0.0.2");
	close(fd);
	/* An IPv4 client reaches a dual-stack [::] listener. */
	fd = tcp_connect(p, ports[1]);
	len = sizeof(peer);
	getpeername(fd, (struct sockaddr *)&peer, &len);
	expect_int(p, "dual_peer_family", peer.sin_family, AF_INET);
	expect_true(p, "dual_peer_port", ntohs(peer.sin_port) == ports[1]);
	expect_rc(p, "dual_send", send(fd, "dual", 4, 0), 4, 0);
	close(fd);
}

/* ---- v6only_beside_v4: [::]:P with IPV6_V6ONLY next to 0.0.0.0:P (redis does this) - */

static void v6only_server(struct peer *p)
{
	int l4 = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a4 = {.sin_family = AF_INET};
	if (bind(l4, (struct sockaddr *)&a4, sizeof(a4)) || listen(l4, 8))
		die(p, "listen 0.0.0.0");
	uint16_t port = sock_port(p, l4);
	int l6 = socket(AF_INET6, SOCK_STREAM, 0);
	setsockopt(l6, IPPROTO_IPV6, IPV6_V6ONLY, &(int){1}, sizeof(int));
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(port),
				  .sin6_addr = IN6ADDR_ANY_INIT};
	expect_rc(p, "bind_v6only_same_port", bind(l6, (struct sockaddr *)&a6, sizeof(a6)), 0, 0);
	expect_rc(p, "listen_v6only", listen(l6, 8), 0, 0);
	sync_send_data(p, &port, sizeof(port));
	/* Each client lands on the listener of its own family. */
	for (int i = 0; i < 2; i++) {
		struct pollfd pfd[2] = {{.fd = l4, .events = POLLIN}, {.fd = l6, .events = POLLIN}};
		if (poll(pfd, 2, 10000) <= 0)
			die(p, "poll listeners");
		bool v6 = !(pfd[0].revents & POLLIN);
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		int fd = accept(v6 ? l6 : l4, (struct sockaddr *)&peer, &plen);
		if (fd < 0)
			die(p, "accept");
		char c = 0;
		expect_rc(p, "read_family_byte", read(fd, &c, 1), 1, 0);
		expect_int(p, v6 ? "v6_listener_got" : "v4_listener_got", c, v6 ? '6' : '4');
		expect_int(p, v6 ? "v6_peer_family" : "v4_peer_family", peer.ss_family,
			   v6 ? AF_INET6 : AF_INET);
		if (v6) {
			char text[INET6_ADDRSTRLEN];
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&peer)->sin6_addr, text, sizeof(text));
			expect_str(p, "v6_peer_addr", text, "::1");
		}
		close(fd);
	}
	close(l4);
	close(l6);
}

static void v6only_client(struct peer *p)
{
	uint16_t port;
	sync_recv_data(p, &port, sizeof(port));
	int fd = tcp_connect(p, port);
	expect_rc(p, "send_4", send(fd, "4", 1, 0), 1, 0);
	close(fd);
	fd = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(port),
				  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	expect_rc(p, "connect_v6", connect(fd, (struct sockaddr *)&a6, sizeof(a6)), 0, 0);
	expect_rc(p, "send_6", send(fd, "6", 1, 0), 1, 0);
	close(fd);
}

/* ---- options: the common options answer as the kernel does ------------------------ */

static int get_int(int fd, int level, int name)
{
	int v = -12345;
	socklen_t len = sizeof(v);
	if (getsockopt(fd, level, name, &v, &len))
		return -errno;
	return v;
}

static void opt_int(struct peer *p, int fd, const char *key, int level, int name, int set,
		    int want_default, int want_after)
{
	char k[64];
	snprintf(k, sizeof(k), "%s_default", key);
	expect_int(p, k, get_int(fd, level, name), want_default);
	snprintf(k, sizeof(k), "%s_set", key);
	expect_rc(p, k, setsockopt(fd, level, name, &set, sizeof(set)), 0, 0);
	snprintf(k, sizeof(k), "%s_after", key);
	expect_int(p, k, get_int(fd, level, name), want_after);
}

static void options_common(struct peer *p, int fd)
{
	opt_int(p, fd, "tcp_nodelay", IPPROTO_TCP, TCP_NODELAY, 1, 0, 1);
	opt_int(p, fd, "so_keepalive", SOL_SOCKET, SO_KEEPALIVE, 1, 0, 1);
	/* The kernel doubles the value for its bookkeeping (socket(7)). */
	expect_rc(p, "so_rcvbuf_set", setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &(int){65536}, sizeof(int)),
		  0, 0);
	expect_int(p, "so_rcvbuf", get_int(fd, SOL_SOCKET, SO_RCVBUF), 131072);
	expect_rc(p, "so_sndbuf_set", setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &(int){65536}, sizeof(int)),
		  0, 0);
	expect_int(p, "so_sndbuf", get_int(fd, SOL_SOCKET, SO_SNDBUF), 131072);
	expect_int(p, "so_error", get_int(fd, SOL_SOCKET, SO_ERROR), 0);
	expect_int(p, "so_type", get_int(fd, SOL_SOCKET, SO_TYPE), SOCK_STREAM);
	expect_int(p, "so_domain", get_int(fd, SOL_SOCKET, SO_DOMAIN), AF_INET);
	expect_int(p, "so_protocol", get_int(fd, SOL_SOCKET, SO_PROTOCOL), IPPROTO_TCP);
	expect_int(p, "so_acceptconn", get_int(fd, SOL_SOCKET, SO_ACCEPTCONN), 0);
	opt_int(p, fd, "tcp_keepidle", IPPROTO_TCP, TCP_KEEPIDLE, 30, 7200, 30);

	struct linger l = {.l_onoff = 7, .l_linger = 7};
	socklen_t len = sizeof(l);
	expect_rc(p, "so_linger_get", getsockopt(fd, SOL_SOCKET, SO_LINGER, &l, &len), 0, 0);
	expect_true(p, "so_linger_default", l.l_onoff == 0 && l.l_linger == 0 && len == sizeof(l));
	l = (struct linger){.l_onoff = 1, .l_linger = 5};
	expect_rc(p, "so_linger_set", setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0, 0);
	l = (struct linger){0};
	getsockopt(fd, SOL_SOCKET, SO_LINGER, &l, &len);
	expect_true(p, "so_linger_after", l.l_onoff == 1 && l.l_linger == 5);
	l = (struct linger){0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));

	struct tcp_info ti;
	memset(&ti, 0xff, sizeof(ti));
	len = sizeof(ti);
	expect_rc(p, "tcp_info", getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0, 0);
	expect_int(p, "tcp_info_len", len, sizeof(ti));
	expect_int(p, "tcp_info_state", ti.tcpi_state, TCP_ESTABLISHED);

	/* A short int option is truncated to the length given, not refused. */
	int v = 0;
	len = 2;
	expect_rc(p, "getsockopt_short_len", getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len), 0, 0);
	expect_int(p, "getsockopt_short_len_out", len, 2);
	v = 1;
	expect_rc(p, "setsockopt_short_len", setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, 2), -1,
		  EINVAL);
	len = sizeof(v);
	expect_rc(p, "unknown_option", getsockopt(fd, SOL_SOCKET, 12345, &v, &len), -1,
		  ENOPROTOOPT);
}

static void options_server(struct peer *p)
{
	expect_int(p, "listener_acceptconn", get_int(p->lfd, SOL_SOCKET, SO_ACCEPTCONN), 1);
	expect_int(p, "listener_reuseaddr", get_int(p->lfd, SOL_SOCKET, SO_REUSEADDR), 1);
	int fd = tcp_accept(p, p->lfd);
	options_common(p, fd);
	sync_send(p);
	sync_wait(p);
	close(fd);
}

static void options_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	options_common(p, fd);
	expect_int(p, "so_reuseaddr", get_int(fd, SOL_SOCKET, SO_REUSEADDR), 0);
	sync_wait(p);
	sync_send(p);
	close(fd);
}

/* ---- reuseport: two listeners share a port with SO_REUSEPORT, not without ------- */

static int bound_socket(struct peer *p, uint16_t port, int opt)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (opt)
		setsockopt(fd, SOL_SOCKET, opt, &(int){1}, sizeof(int));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (bind(fd, (struct sockaddr *)&a, sizeof(a))) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

static void reuseport_server(struct peer *p)
{
	int a = bound_socket(p, 0, SO_REUSEPORT);
	if (a < 0)
		die(p, "bind reuseport");
	uint16_t port = sock_port(p, a);
	expect_rc(p, "listen_a", listen(a, 8), 0, 0);
	int b = bound_socket(p, port, SO_REUSEPORT);
	expect_rc(p, "bind_b_reuseport", b < 0 ? -1 : 0, 0, 0);
	expect_rc(p, "listen_b", listen(b, 8), 0, 0);
	int c = bound_socket(p, port, SO_REUSEADDR);
	expect_rc(p, "bind_c_reuseaddr_only", c, -1, EADDRINUSE);
	int d = bound_socket(p, port, 0);
	expect_rc(p, "bind_d_plain", d, -1, EADDRINUSE);
	expect_int(p, "so_reuseport", get_int(a, SOL_SOCKET, SO_REUSEPORT), 1);
	sync_send_data(p, &port, sizeof(port));
	/* Each connection lands on one of the two listeners. */
	int served = 0;
	while (served < 4) {
		struct pollfd pfd[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
		if (poll(pfd, 2, 10000) <= 0)
			break;
		for (int i = 0; i < 2; i++) {
			if (!(pfd[i].revents & POLLIN))
				continue;
			int fd = tcp_accept(p, pfd[i].fd);
			char buf[4];
			if (read_full(fd, buf, 4) == 4 && send(fd, buf, 4, 0) == 4)
				served++;
			close(fd);
		}
	}
	expect_int(p, "served", served, 4);
	close(a);
	close(b);
}

static void reuseport_client(struct peer *p)
{
	uint16_t port;
	sync_recv_data(p, &port, sizeof(port));
	int ok = 0;
	for (int i = 0; i < 4; i++) {
		int fd = tcp_connect(p, port);
		char buf[4];
		if (send(fd, "ping", 4, 0) == 4 && read_full(fd, buf, 4) == 4 && !memcmp(buf, "ping", 4))
			ok++;
		close(fd);
	}
	expect_int(p, "round_trips", ok, 4);
}

/* ---- fcntl_flags: O_NONBLOCK, FD_CLOEXEC, FIONBIO, FIONREAD, SIOCOUTQ -------------- */

static void fcntl_server(struct peer *p)
{
	set_nonblock(p, p->lfd, true);
	expect_rc(p, "accept_nothing_pending", accept(p->lfd, NULL, NULL), -1, EAGAIN);
	sync_send(p);
	expect_true(p, "listener_readable", wait_for(p->lfd, POLLIN) & POLLIN);
	int fd = accept4(p->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	expect_true(p, "accept4_nonblock", fd >= 0 && (fcntl(fd, F_GETFL) & O_NONBLOCK));
	expect_int(p, "accept4_cloexec", fcntl(fd, F_GETFD), FD_CLOEXEC);
	sync_send(p);
	expect_true(p, "listener_readable_2", wait_for(p->lfd, POLLIN) & POLLIN);
	/* accept(2) does not inherit the listener's O_NONBLOCK on Linux. */
	int fd2 = accept(p->lfd, NULL, NULL);
	expect_int(p, "accept_not_nonblock", fd2 >= 0 ? fcntl(fd2, F_GETFL) & O_NONBLOCK : -1, 0);
	expect_int(p, "accept_no_cloexec", fcntl(fd2, F_GETFD), 0);
	char buf[123];
	memset(buf, 'f', sizeof(buf));
	expect_rc(p, "send_123", send(fd, buf, sizeof(buf), 0), 123, 0);
	sync_wait(p);
	close(fd2);
	close(fd);
}

static void fcntl_client(struct peer *p)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	expect_true(p, "sock_nonblock", fcntl(s, F_GETFL) & O_NONBLOCK);
	expect_int(p, "sock_accmode", fcntl(s, F_GETFL) & O_ACCMODE, O_RDWR);
	expect_int(p, "sock_cloexec", fcntl(s, F_GETFD), FD_CLOEXEC);
	expect_rc(p, "clear_cloexec", fcntl(s, F_SETFD, 0), 0, 0);
	expect_int(p, "cloexec_cleared", fcntl(s, F_GETFD), 0);
	close(s);

	sync_wait(p);
	int fd = tcp_connect(p, p->port);
	sync_wait(p);
	int fd2 = tcp_connect(p, p->port);
	char buf[200];
	expect_int(p, "blocking_by_default", fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
	set_nonblock(p, fd2, true);
	expect_rc(p, "nonblock_recv", recv(fd2, buf, sizeof(buf), 0), -1, EAGAIN);
	set_nonblock(p, fd2, false);
	expect_int(p, "nonblock_cleared", fcntl(fd2, F_GETFL) & O_NONBLOCK, 0);
	expect_rc(p, "fionbio_on", ioctl(fd2, FIONBIO, &(int){1}), 0, 0);
	expect_true(p, "fionbio_sets_flag", fcntl(fd2, F_GETFL) & O_NONBLOCK);
	expect_rc(p, "fionbio_recv", recv(fd2, buf, sizeof(buf), 0), -1, EAGAIN);
	expect_rc(p, "fionbio_off", ioctl(fd2, FIONBIO, &(int){0}), 0, 0);

	int avail = -1;
	for (int i = 0; i < 500; i++) {
		if (ioctl(fd, FIONREAD, &avail))
			break;
		if (avail == 123)
			break;
		sleep_ms(10);
	}
	expect_int(p, "fionread", avail, 123);
	expect_rc(p, "read_all", read_full(fd, buf, 123), 123, 0);
	ioctl(fd, FIONREAD, &avail);
	expect_int(p, "fionread_after", avail, 0);
	int outq = -1;
	send(fd, "z", 1, 0);
	for (int i = 0; i < 500; i++) {
		if (ioctl(fd, SIOCOUTQ, &outq) || outq == 0)
			break;
		sleep_ms(10);
	}
	expect_int(p, "siocoutq_drains", outq, 0);
	sync_send(p);
	close(fd2);
	close(fd);
}

/* ---- dup_shares_stream: every dup names the same stream; EOF after the last close --- */

static void dup_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	int alias = dup(fd);
	char buf[8] = {0};
	expect_rc(p, "read_abc", read_full(alias, buf, 3), 3, 0);
	expect_str(p, "bytes", buf, "ABC");
	sync_wait(p); /* all but one of the client's fds are closed now */
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	expect_rc(p, "no_eof_yet", poll(&pfd, 1, 200), 0, 0);
	sync_send(p);
	expect_rc(p, "read_d", read(fd, buf, 1), 1, 0);
	expect_rc(p, "eof_after_last_close", read(fd, buf, 1), 0, 0);
	close(fd);
	close(alias);
}

static void dup_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int d = dup(fd);
	close(fd);
	expect_rc(p, "send_via_dup", send(d, "A", 1, 0), 1, 0);
	expect_rc(p, "dup2", dup2(d, 200), 200, 0);
	expect_rc(p, "send_via_dup2", send(200, "B", 1, 0), 1, 0);
	int d3 = fcntl(d, F_DUPFD_CLOEXEC, 300);
	expect_true(p, "f_dupfd_cloexec", d3 >= 300);
	expect_int(p, "dupfd_cloexec_flag", fcntl(d3, F_GETFD), FD_CLOEXEC);
	expect_int(p, "dup_no_cloexec", fcntl(200, F_GETFD), 0);
	expect_rc(p, "send_via_dupfd", write(d3, "C", 1), 1, 0);
	expect_rc(p, "dup3", dup3(d, 201, O_CLOEXEC), 201, 0);
	/* File status flags live in the shared open file, fd flags do not. */
	set_nonblock(p, d, true);
	expect_true(p, "nonblock_shared", fcntl(201, F_GETFL) & O_NONBLOCK);
	set_nonblock(p, 201, false);
	struct sockaddr_in a, b;
	socklen_t al = sizeof(a), bl = sizeof(b);
	getsockname(d, (struct sockaddr *)&a, &al);
	getsockname(d3, (struct sockaddr *)&b, &bl);
	expect_true(p, "same_name", al == bl && !memcmp(&a, &b, al));
	/* dup2 onto itself is a no-op; dup2 over a live dup closes that one only. */
	expect_true(p, "dup2_self", dup2(d, d) == d);
	expect_rc(p, "dup2_over", dup2(d3, 201), 201, 0);
	close(d);
	close(200);
	close(d3);
	sync_send(p);
	sync_wait(p);
	expect_rc(p, "send_via_last", send(201, "D", 1, 0), 1, 0);
	close(201);
}

/* ---- threads: streams move between threads; one thread blocks, another sends ---- */

struct thread_arg {
	struct peer *p;
	int fd;
	long result;
};

static void *thread_reader(void *v)
{
	struct thread_arg *t = v;
	unsigned char *buf = malloc(1 << 20);
	t->result = (long)read_full(t->fd, buf, 1 << 20);
	if (!pattern_check(buf, 1 << 20, 0))
		t->result = -2;
	uint32_t n = (uint32_t)t->result;
	send(t->fd, &n, sizeof(n), 0);
	free(buf);
	return NULL;
}

static void threads_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	struct thread_arg t = {.p = p, .fd = fd};
	pthread_t th;
	pthread_create(&th, NULL, thread_reader, &t);
	pthread_join(th, NULL);
	expect_int(p, "worker_read", t.result, 1 << 20);
	close(fd);
}

static void *thread_blocked_recv(void *v)
{
	struct thread_arg *t = v;
	uint32_t n = 0;
	t->result = (long)read_full(t->fd, &n, sizeof(n)) == sizeof(n) ? (long)n : -1;
	return NULL;
}

static void *thread_connect(void *v)
{
	struct thread_arg *t = v;
	t->fd = tcp_connect(t->p, t->p->port);
	return NULL;
}

static void threads_client(struct peer *p)
{
	struct thread_arg c = {.p = p};
	pthread_t th;
	pthread_create(&th, NULL, thread_connect, &c);
	pthread_join(th, NULL);
	struct thread_arg r = {.p = p, .fd = c.fd};
	pthread_create(&th, NULL, thread_blocked_recv, &r);
	sleep_ms(50); /* let the reader block first */
	unsigned char *buf = malloc(1 << 20);
	pattern_fill(buf, 1 << 20, 0);
	expect_int(p, "sent_from_main", (long)write_all(p, c.fd, buf, 1 << 20), 1 << 20);
	pthread_join(th, NULL);
	expect_int(p, "reply_in_other_thread", r.result, 1 << 20);
	free(buf);
	close(c.fd);
}

/* ---- fork_child_close: a child closing its inherited copy leaves the stream alone -- */

static void fork_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char buf[4] = {0};
	expect_rc(p, "read_after_child_exit", read_full(fd, buf, 2), 2, 0);
	expect_str(p, "bytes", buf, "ok");
	expect_rc(p, "eof", read(fd, buf, 1), 0, 0);
	close(fd);
}

static void fork_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(fd);
		_exit(0);
	}
	int st = -1;
	waitpid(pid, &st, 0);
	expect_int(p, "child_exit", st, 0);
	expect_rc(p, "send_after_child", send(fd, "ok", 2, 0), 2, 0);
	close(fd);
}

/* ---- high_fd: a stream dup'ed above the fd limit ferry started with ----------- */

static void highfd_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char buf[8] = {0};
	expect_rc(p, "read", read_full(fd, buf, 4), 4, 0);
	expect_str(p, "bytes", buf, "high");
	expect_rc(p, "send", send(fd, "back", 4, 0), 4, 0);
	expect_rc(p, "eof", read(fd, buf, 1), 0, 0);
	close(fd);
}

static void highfd_client(struct peer *p)
{
	/* Start small, as a daemon does before it raises its own limit. */
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rlim_t hard = rl.rlim_max;
	rl.rlim_cur = 1024;
	setrlimit(RLIMIT_NOFILE, &rl);
	int fd = tcp_connect(p, p->port);
	rl.rlim_cur = hard < 8192 ? hard : 8192;
	expect_rc(p, "raise_limit", setrlimit(RLIMIT_NOFILE, &rl), 0, 0);
	int target = (int)rl.rlim_cur - 10;
	expect_true(p, "dup2_high", dup2(fd, target) == target);
	close(fd);
	expect_rc(p, "send_high", send(target, "high", 4, 0), 4, 0);
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN};
	expect_rc(p, "epoll_add_high", epoll_ctl(ep, EPOLL_CTL_ADD, target, &ev), 0, 0);
	expect_rc(p, "epoll_high", epoll_wait(ep, &ev, 1, 5000), 1, 0);
	struct pollfd pfd = {.fd = target, .events = POLLIN};
	expect_rc(p, "poll_high", poll(&pfd, 1, 5000), 1, 0);
	char buf[8] = {0};
	expect_rc(p, "recv_high", read_full(target, buf, 4), 4, 0);
	expect_str(p, "bytes", buf, "back");
	close(ep);
	close(target);
}

const struct scenario scen_options[] = {
	{"names", names_server, names_client, false},
	{"ipv6", v6_server, v6_client, false},
	{"wildcard_listeners", wild_server, wild_client, false},
	{"v6only_beside_v4", v6only_server, v6only_client, false},
	{"options", options_server, options_client, false},
	{"reuseport", reuseport_server, reuseport_client, false},
	{"fcntl_flags", fcntl_server, fcntl_client, false},
	{"dup_shares_stream", dup_server, dup_client, false},
	{"high_fd", highfd_server, highfd_client, false},
	{"threads", threads_server, threads_client, false},
	{"fork_child_close", fork_server, fork_client, false},
	{NULL, NULL, NULL, false},
};
