/* IPv4 and IPv6 socket addresses as the interposer handles them. */
#include "autoconfig.h"

#include "preload/sockaddr.h"

#include <netinet/in.h>
#include <string.h>

uint16_t sockaddr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)sa)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)(const void *)sa)->sin6_port);
}

void sockaddr_set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)(void *)sa)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)(void *)sa)->sin6_port = htons(port);
}

bool sockaddr_is_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr == 0;
	const struct sockaddr_in6 *in6 = (const void *)sa;
	return !memcmp(&in6->sin6_addr, &in6addr_any, sizeof(in6addr_any));
}

void sockaddr_any_to_loopback(struct sockaddr_storage *ss)
{
	if (!sockaddr_is_any((struct sockaddr *)ss))
		return;
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)(void *)ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		((struct sockaddr_in6 *)(void *)ss)->sin6_addr = in6addr_loopback;
}

socklen_t sockaddr_len(int family)
{
	return family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

socklen_t sockaddr_unmap(const struct sockaddr *sa, struct sockaddr_storage *out)
{
	const struct sockaddr_in6 *in6 = (const void *)sa;
	if (sa->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
		struct sockaddr_in *in = (void *)out;
		memset(out, 0, sizeof(*out));
		in->sin_family = AF_INET;
		in->sin_port = in6->sin6_port;
		memcpy(&in->sin_addr, &in6->sin6_addr.s6_addr[12], 4);
		return sizeof(*in);
	}
	socklen_t l = sockaddr_len(sa->sa_family);
	memcpy(out, sa, l);
	return l;
}

void sockaddr_copy_out(const struct sockaddr_storage *ss, socklen_t len, struct sockaddr *addr,
		       socklen_t *alen)
{
	if (!addr || !alen)
		return;
	memcpy(addr, ss, *alen < len ? *alen : len);
	*alen = len;
}
