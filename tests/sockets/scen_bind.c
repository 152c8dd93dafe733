/*
 * Scenarios: what each end sees of the connection's addresses after every
 * bind/connect order a client may use: bound to the wildcard, to another
 * loopback address, to its own address, not at all, through an IPv6
 * socket to a v4-mapped address, and to the wildcard as the destination.
 * The server tells what accept, getpeername and getsockname say; the
 * client what getsockname and getpeername say, and what a bind too late
 * answers.
 */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* "address port" of sa, the port as "same" when it is want (ports differ
 * between runs; that they match across calls is what counts). */
static void addr_line(const struct sockaddr_storage *ss, uint16_t want, char *out, size_t cap)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	uint16_t port = 0;
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)ss;
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		port = ntohs(in->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		port = ntohs(in6->sin6_port);
	}
	snprintf(out, cap, "%s %s", ip, port == want ? "same" : port ? "other" : "0");
}

static void expect_addr(struct peer *p, const char *key, int fd, bool peer, uint16_t port,
			const char *want)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int rc = peer ? getpeername(fd, (struct sockaddr *)&ss, &len)
		      : getsockname(fd, (struct sockaddr *)&ss, &len);
	char line[80] = "failed";
	if (rc == 0)
		addr_line(&ss, port, line, sizeof(line));
	expect_str(p, key, line, want);
}

/* The server's half of every scenario: one connection, whose client tells
 * its own port first; the addresses it expects come in the same message. */
struct bind_view {
	uint16_t port;     /* the client's port as it sees it */
	char peer[48];     /* what the server's getpeername must say */
	char local[48];    /* what its getsockname must say */
};

static void bind_server(struct peer *p)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd = accept(p->lfd, (struct sockaddr *)&ss, &len);
	if (fd < 0)
		die(p, "accept");
	struct bind_view v;
	sync_recv_data(p, &v, sizeof(v));
	char line[80];
	addr_line(&ss, v.port, line, sizeof(line));
	expect_str(p, "accept_addr", line, v.peer);
	expect_addr(p, "peername", fd, true, v.port, v.peer);
	expect_addr(p, "sockname", fd, false, p->port, v.local);
	close(fd);
}

/* Connects fd to the server, the destination's address given as text. */
static void connect_to(struct peer *p, int fd, int family, const char *ip)
{
	struct sockaddr_storage ss = {.ss_family = (sa_family_t)family};
	socklen_t len;
	if (family == AF_INET) {
		struct sockaddr_in *in = (void *)&ss;
		in->sin_port = htons(p->port);
		inet_pton(AF_INET, ip, &in->sin_addr);
		len = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (void *)&ss;
		in6->sin6_port = htons(p->port);
		inet_pton(AF_INET6, ip, &in6->sin6_addr);
		len = sizeof(*in6);
	}
	expect_rc(p, "connect", connect(fd, (struct sockaddr *)&ss, len), 0, 0);
}

static void bind_to(struct peer *p, int fd, int family, const char *ip)
{
	struct sockaddr_storage ss = {.ss_family = (sa_family_t)family};
	socklen_t len = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	if (family == AF_INET)
		inet_pton(AF_INET, ip, &((struct sockaddr_in *)(void *)&ss)->sin_addr);
	else
		inet_pton(AF_INET6, ip, &((struct sockaddr_in6 *)(void *)&ss)->sin6_addr);
	expect_rc(p, "bind", bind(fd, (struct sockaddr *)&ss, len), 0, 0);
}

/*
 * One client: a socket of family, bound to bind_ip first unless NULL,
 * connected to dst_ip; it must see itself as local_ip, the server as
 * peer_ip; the server must see it as seen_ip and itself as 127.0.0.1.
 */
static void bind_client(struct peer *p, int family, const char *bind_ip, const char *dst_ip,
			const char *local_ip, const char *peer_ip, const char *seen_ip)
{
	int fd = socket(family, SOCK_STREAM, 0);
	if (fd < 0)
		die(p, "socket");
	uint16_t bound = 0;
	if (bind_ip) {
		bind_to(p, fd, family, bind_ip);
		bound = sock_port(p, fd);
	}
	connect_to(p, fd, family, dst_ip);
	uint16_t port = sock_port(p, fd);
	expect_true(p, "port_kept", !bind_ip || port == bound);
	char want[48];
	snprintf(want, sizeof(want), "%s same", local_ip);
	expect_addr(p, "sockname", fd, false, port, want);
	snprintf(want, sizeof(want), "%s same", peer_ip);
	expect_addr(p, "peername", fd, true, p->port, want);
	struct bind_view v = {.port = port};
	snprintf(v.peer, sizeof(v.peer), "%s same", seen_ip);
	snprintf(v.local, sizeof(v.local), "127.0.0.1 same");
	sync_send_data(p, &v, sizeof(v));
	/* Too late to bind: the kernel says EINVAL on a connected socket. */
	struct sockaddr_storage any = {.ss_family = (sa_family_t)family};
	expect_rc(p, "bind_connected", bind(fd, (struct sockaddr *)&any,
					    family == AF_INET ? sizeof(struct sockaddr_in)
							      : sizeof(struct sockaddr_in6)),
		  -1, EINVAL);
	close(fd);
}

static void any_client(struct peer *p)
{
	bind_client(p, AF_INET, "0.0.0.0", "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1");
}

static void other_loopback_client(struct peer *p)
{
	bind_client(p, AF_INET, "127.0.0.2", "127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.2");
}

static void own_client(struct peer *p)
{
	bind_client(p, AF_INET, "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1");
}

static void unbound_client(struct peer *p)
{
	bind_client(p, AF_INET, NULL, "127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1");
}

static void wildcard_dst_client(struct peer *p)
{
	bind_client(p, AF_INET, NULL, "0.0.0.0", "127.0.0.1", "127.0.0.1", "127.0.0.1");
}

static void mapped_client(struct peer *p)
{
	bind_client(p, AF_INET6, "::", "::ffff:127.0.0.1", "::ffff:127.0.0.1", "::ffff:127.0.0.1",
		    "127.0.0.1");
}

static void mapped_unbound_client(struct peer *p)
{
	bind_client(p, AF_INET6, NULL, "::ffff:127.0.0.1", "::ffff:127.0.0.1", "::ffff:127.0.0.1",
		    "127.0.0.1");
}

const struct scenario scen_bind[] = {
	{"bind_any", bind_server, any_client, false},
	{"bind_other_loopback", bind_server, other_loopback_client, false},
	{"bind_own", bind_server, own_client, false},
	{"bind_none", bind_server, unbound_client, false},
	{"connect_wildcard", bind_server, wildcard_dst_client, false},
	{"bind_v6_any_mapped", bind_server, mapped_client, false},
	{"v6_mapped", bind_server, mapped_unbound_client, false},
	{NULL, NULL, NULL, false},
};
