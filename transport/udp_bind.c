/* ferry's own UDP sockets: loopback first, the wildcard when needed (udp_bind.h). */
#include "autoconfig.h"

#include "transport/udp_bind.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "transport/sys.h"

bool udp_addr_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

static socklen_t udp_family_addr(int family, struct sockaddr_storage *ss, bool loopback)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		in->sin_family = AF_INET;
		in->sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
		return sizeof(*in);
	}
	if (family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_addr = loopback ? in6addr_loopback : in6addr_any;
		return sizeof(*in6);
	}
	return 0;
}

int udp_bind_loopback(int fd, int family)
{
	struct sockaddr_storage ss;
	socklen_t len = udp_family_addr(family, &ss, true);
	if (!len)
		return -EAFNOSUPPORT;
	return sys()->bind(fd, (struct sockaddr *)&ss, len) == 0 ? 0 : -errno;
}

static void udp_set_reuse(int fd, int on)
{
	sys()->setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
}

int udp_bind_wide_beside(int fd, int family, int beside)
{
	struct sockaddr_storage ss, at;
	socklen_t len = udp_family_addr(family, &ss, false), atlen = sizeof(at);
	if (!len)
		return -EAFNOSUPPORT;
	if (sys()->getsockname(beside, (struct sockaddr *)&at, &atlen) != 0)
		return -errno;
	in_port_t port = at.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&at)->sin6_port
						  : ((struct sockaddr_in *)&at)->sin_port;
	if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = port;
	else
		((struct sockaddr_in *)&ss)->sin_port = port;
	udp_set_reuse(beside, 1);
	udp_set_reuse(fd, 1);
	int rc = sys()->bind(fd, (struct sockaddr *)&ss, len) == 0 ? 0 : -errno;
	udp_set_reuse(fd, 0);
	udp_set_reuse(beside, 0);
	return rc;
}
