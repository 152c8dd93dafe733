/* Addresses between sockaddr and the stream protocol's wire form. */
#include "autoconfig.h"

#include "preload/stream_wire.h"

#include <netinet/in.h>
#include <string.h>

void wire_addr_from(struct wire_addr *w, const struct sockaddr *sa)
{
	memset(w, 0, sizeof(*w));
	if (!sa)
		return;
	w->family = sa->sa_family;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		w->port = in->sin_port;
		memcpy(w->addr, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		w->port = in6->sin6_port;
		w->scope = in6->sin6_scope_id;
		memcpy(w->addr, &in6->sin6_addr, 16);
	}
}

socklen_t wire_addr_to(const struct wire_addr *w, int family, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *in6 = (void *)ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = w->port;
		if (w->family == AF_INET) {
			in6->sin6_addr.s6_addr[10] = 0xff;
			in6->sin6_addr.s6_addr[11] = 0xff;
			memcpy(&in6->sin6_addr.s6_addr[12], w->addr, 4);
		} else {
			memcpy(&in6->sin6_addr, w->addr, 16);
			in6->sin6_scope_id = w->scope;
		}
		return sizeof(*in6);
	}
	struct sockaddr_in *in = (void *)ss;
	in->sin_family = AF_INET;
	in->sin_port = w->port;
	memcpy(&in->sin_addr, w->family == AF_INET ? w->addr : w->addr + 12, 4);
	return sizeof(*in);
}
