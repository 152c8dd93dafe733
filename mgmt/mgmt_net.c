/* Kernel UDP for the management thread. */
#include "autoconfig.h"

#include "mgmt/mgmt_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "transport/clock.h"
#include "transport/sys.h"
#include "transport/udp_bind.h"

int mgmt_addr_set(struct mgmt_addr *out, const struct sockaddr *sa, socklen_t len)
{
	memset(out, 0, sizeof(*out));
	if (!sa || len < (socklen_t)sizeof(sa_family_t))
		return -EINVAL;
	if (sa->sa_family == AF_INET) {
		if (len < (socklen_t)sizeof(struct sockaddr_in))
			return -EINVAL;
		memcpy(&out->ss, sa, sizeof(struct sockaddr_in));
		out->len = sizeof(struct sockaddr_in);
		return 0;
	}
	if (sa->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	if (len < (socklen_t)sizeof(struct sockaddr_in6))
		return -EINVAL;
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
	if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)(void *)&out->ss;
		s4->sin_family = AF_INET;
		s4->sin_port = s6->sin6_port;
		memcpy(&s4->sin_addr, &s6->sin6_addr.s6_addr[12], 4);
		out->len = sizeof(*s4);
		return 0;
	}
	memcpy(&out->ss, sa, sizeof(*s6));
	out->len = sizeof(*s6);
	return 0;
}

bool mgmt_addr_equal(const struct mgmt_addr *a, const struct mgmt_addr *b)
{
	if (a->ss.ss_family != b->ss.ss_family)
		return false;
	if (a->ss.ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)&a->ss, *y = (const void *)&b->ss;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)&a->ss, *y = (const void *)&b->ss;
		return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id &&
		       !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr));
	}
	return false;
}

uint16_t mgmt_addr_port(const struct mgmt_addr *a)
{
	if (a->ss.ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)&a->ss)->sin_port);
	if (a->ss.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)(const void *)&a->ss)->sin6_port);
	return 0;
}

void mgmt_addr_set_port(struct mgmt_addr *a, uint16_t port)
{
	if (a->ss.ss_family == AF_INET)
		((struct sockaddr_in *)(void *)&a->ss)->sin_port = htons(port);
	else if (a->ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)(void *)&a->ss)->sin6_port = htons(port);
}

int mgmt_addr_family(const struct mgmt_addr *a)
{
	return a->ss.ss_family;
}

void mgmt_addr_format(const struct mgmt_addr *a, char *buf, size_t cap)
{
	char host[INET6_ADDRSTRLEN] = "?";
	if (a->ss.ss_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)&a->ss)->sin_addr,
			  host, sizeof(host));
		snprintf(buf, cap, "%s:%u", host, mgmt_addr_port(a));
	} else if (a->ss.ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)&a->ss)->sin6_addr,
			  host, sizeof(host));
		snprintf(buf, cap, "[%s]:%u", host, mgmt_addr_port(a));
	} else {
		snprintf(buf, cap, "?");
	}
}

/* An unbound datagram socket with the MGMT_NET_* options; the fd or -errno. */
static int net_socket(int family, bool bound_to_addr, unsigned flags)
{
	int fd = sys()->socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1, rc = 0;
	if (flags & MGMT_NET_REUSEPORT)
		rc = sys()->setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (rc == 0 && (flags & MGMT_NET_RECVERR)) {
		if (family == AF_INET)
			rc = sys()->setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one));
		else
			rc = sys()->setsockopt(fd, IPPROTO_IPV6, IPV6_RECVERR, &one, sizeof(one));
	}
	/* The control socket of each family only talks to its own family;
	 * listeners keep the kernel default so [::]:P also hears IPv4, as the
	 * TCP listener beside it does. */
	if (rc == 0 && family == AF_INET6 && (!bound_to_addr || (flags & MGMT_NET_V6ONLY)))
		rc = sys()->setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (rc < 0) {
		int err = -errno;
		sys()->close(fd);
		return err;
	}
	return fd;
}

int mgmt_net_socket(int family, const struct mgmt_addr *addr, unsigned flags)
{
	int fd = net_socket(family, addr != NULL, flags);
	if (fd < 0)
		return fd;
	int rc;
	if (!addr && (flags & MGMT_NET_LOOPBACK)) {
		rc = udp_bind_loopback(fd, family);
	} else {
		struct mgmt_addr any;
		memset(&any, 0, sizeof(any));
		any.ss.ss_family = (sa_family_t)family;
		any.len = family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
		const struct mgmt_addr *b = addr ? addr : &any;
		rc = sys()->bind(fd, (const struct sockaddr *)&b->ss, b->len) == 0 ? 0 : -errno;
	}
	if (rc < 0) {
		sys()->close(fd);
		return rc;
	}
	return fd;
}

int mgmt_net_widen(int old, int family, unsigned flags)
{
	int fd = net_socket(family, false, flags);
	if (fd < 0)
		return fd;
	int rc = udp_bind_wide_beside(fd, family, old);
	if (rc < 0) {
		sys()->close(fd);
		return rc;
	}
	return fd;
}

int mgmt_net_read_error(int fd, struct mgmt_addr *dest, int *err)
{
	struct sockaddr_storage ss;
	uint8_t data[256];
	union {
		char buf[512];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = data, .iov_len = sizeof(data)};
	struct msghdr msg = {.msg_name = &ss, .msg_namelen = sizeof(ss), .msg_iov = &iov,
			     .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf)};
	memset(&ss, 0, sizeof(ss));
	if (sys()->recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	*err = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR) ||
		    (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR)) {
			struct sock_extended_err ee;
			memcpy(&ee, CMSG_DATA(c), sizeof(ee));
			if (ee.ee_origin == SO_EE_ORIGIN_ICMP || ee.ee_origin == SO_EE_ORIGIN_ICMP6 ||
			    ee.ee_origin == SO_EE_ORIGIN_LOCAL)
				*err = (int)ee.ee_errno;
		}
	}
	if (mgmt_addr_set(dest, (struct sockaddr *)&ss, msg.msg_namelen) < 0)
		memset(dest, 0, sizeof(*dest));
	return 1;
}

static uint64_t mgmt_mtu_asks; /* atomic */

uint64_t mgmt_net_mtu_asks(void)
{
	return __atomic_load_n(&mgmt_mtu_asks, __ATOMIC_RELAXED);
}

uint32_t mgmt_net_udp_payload_max(const struct mgmt_addr *addr)
{
	__atomic_add_fetch(&mgmt_mtu_asks, 1, __ATOMIC_RELAXED);
	int family = mgmt_addr_family(addr);
	int fd = sys()->socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	/* connect() on UDP sends nothing; it only resolves the route, whose
	 * MTU IP_MTU then reports. */
	int mtu = 0;
	socklen_t len = sizeof(mtu);
	if (sys()->connect(fd, (const struct sockaddr *)&addr->ss, addr->len) < 0 ||
	    sys()->getsockopt(fd, family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6,
		       family == AF_INET ? IP_MTU : IPV6_MTU, &mtu, &len) < 0)
		mtu = 0;
	sys()->close(fd);
	uint32_t overhead = family == AF_INET ? 28u : 48u;
	return mtu > (int)overhead ? (uint32_t)mtu - overhead : 0;
}

/* Errors an ICMP message leaves in SO_ERROR. */
static bool icmp_errno(int err)
{
	return err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH ||
	       err == EHOSTDOWN || err == ENETDOWN || err == EPROTO;
}

int mgmt_net_send(int fd, const void *buf, size_t len, const struct sockaddr *to, socklen_t tolen)
{
	bool retried = false;
	for (;;) {
		if (sys()->sendto(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL, to, tolen) >= 0)
			return 0;
		if (errno == EINTR)
			continue;
		/* With IP_RECVERR an ICMP error for an earlier datagram, to any
		 * address, is also kept in SO_ERROR, and the next sendto()
		 * returns it instead of sending (the kernel clears it then).
		 * The error queue tells whose it was; send once more to learn
		 * whether this datagram has an error of its own. */
		if (!retried && icmp_errno(errno)) {
			retried = true;
			continue;
		}
		return -errno;
	}
}

uint64_t mgmt_net_random64(void)
{
	uint64_t v = 0;
	ssize_t n;
	do {
		n = getrandom(&v, sizeof(v), 0);
	} while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(v)) {
		/* Only on kernels without getrandom: tokens are a guard against
		 * stray packets, not a secret, so time and pid will do. */
		v ^= clock_now_ns() * 0x9E3779B97F4A7C15ull ^ ((uint64_t)getpid() << 32);
	}
	return v ? v : 1;
}
