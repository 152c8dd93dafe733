/* Listeners: the queue of accepted streams (and of connections other
 * processes offered) behind each listening socket. */
#include "autoconfig.h"

#include "preload/stream_internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "preload/sockaddr.h"

static struct listener *listeners;
/* Addresses of shared listeners this process let go of: an OPEN for one
 * (a client's session still leads here) is sent back to the rendezvous. */
#define LISTENERS_GONE_MAX 8
static struct wire_addr lis_gone[LISTENERS_GONE_MAX];
static unsigned lis_gone_next;

static bool listener_matches(const struct listener *l, const struct wire_addr *dst)
{
	if (l->port != dst->port)
		return false;
	if (sockaddr_is_any((const struct sockaddr *)&l->addr))
		return l->addr.ss_family == AF_INET6 ? !l->v6only || dst->family == AF_INET6
						     : dst->family == AF_INET;
	struct sockaddr_storage ss;
	wire_addr_to(dst, l->addr.ss_family, &ss);
	if (l->addr.ss_family == AF_INET)
		return ((struct sockaddr_in *)(void *)&ss)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)(const void *)&l->addr)->sin_addr.s_addr;
	return !memcmp(&((struct sockaddr_in6 *)(void *)&ss)->sin6_addr,
		       &((const struct sockaddr_in6 *)(const void *)&l->addr)->sin6_addr, 16);
}

struct listener *listener_add(const struct sockaddr *addr, socklen_t len, int backlog,
			      struct ffile *file)
{
	struct listener *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	memcpy(&l->addr, addr, len);
	l->addr_len = len;
	l->port = htons(sockaddr_port(addr));
	l->file = file;
	l->backlog = backlog;
	l->next = listeners;
	listeners = l;
	return l;
}

struct stream *listener_pop(struct listener *l)
{
	struct stream *s = l->head;
	if (!s)
		return NULL;
	l->head = s->accept_next;
	if (!l->head)
		l->tail = NULL;
	l->queued--;
	s->accept_next = NULL;
	if (!l->head && !l->offers)
		stream_ready(l->file, 0, 0);
	return s;
}

struct listener *listener_find(const struct sockaddr *addr)
{
	uint16_t port = htons(sockaddr_port(addr));
	for (struct listener *l = listeners; l; l = l->next)
		if (l->port == port && l->addr.ss_family == addr->sa_family)
			return l;
	return NULL;
}

int listener_offer_add(struct listener *l, const struct mgmt_offer *o)
{
	struct listener_offer *n = malloc(sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->o = *o;
	n->next = NULL;
	if (!l->offers)
		l->offers_tail = &l->offers;
	*l->offers_tail = n;
	l->offers_tail = &n->next;
	stream_ready(l->file, EPOLLIN, EPOLLIN);
	return 0;
}

bool listener_offer_pop(struct listener *l, struct mgmt_offer *out)
{
	struct listener_offer *o = l->offers;
	if (!o)
		return false;
	l->offers = o->next;
	*out = o->o;
	free(o);
	if (!l->head && !l->offers)
		stream_ready(l->file, 0, 0);
	return true;
}

void listener_remove(struct rpc *rpc, struct listener *l, const struct listener_keep *k)
{
	for (struct listener **p = &listeners; *p; p = &(*p)->next) {
		if (*p == l) {
			*p = l->next;
			break;
		}
	}
	if (l->shared) {
		struct wire_addr *g = &lis_gone[lis_gone_next++ % LISTENERS_GONE_MAX];
		wire_addr_from(g, (const struct sockaddr *)&l->addr);
		if (sockaddr_is_any((const struct sockaddr *)&l->addr))
			g->family = 0; /* any address of ours on that port */
	}
	struct stream *s;
	while ((s = listener_pop(l)) != NULL) {
		if (!s->reset && k && k->stream(s, k->arg))
			continue;
		if (!s->reset)
			stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, stream_ctl_cont);
		s->reset = true;
		stream_put(s);
	}
	/* Offers not taken: handed on, or their owner resets them once
	 * nobody takes them. */
	struct mgmt_offer o;
	while (listener_offer_pop(l, &o))
		if (k && k->offer)
			k->offer(&o, k->arg);
	free(l);
}

bool listener_gone(const struct wire_addr *dst)
{
	for (unsigned i = 0; i < LISTENERS_GONE_MAX; i++)
		if (lis_gone[i].port && lis_gone[i].port == dst->port &&
		    (lis_gone[i].family == 0 || !memcmp(lis_gone[i].addr, dst->addr, 16)))
			return true;
	return false;
}

struct listener *listener_match(const struct wire_addr *dst)
{
	struct listener *l = listeners;
	while (l && !listener_matches(l, dst))
		l = l->next;
	return l;
}

bool listener_has_room(const struct listener *l)
{
	/* A full queue refuses, as a SYN flood guard would; the kernel's
	 * default somaxconn is the floor so small backlogs still work. */
	int limit = l->backlog > 4096 ? l->backlog : 4096;
	return l->queued < limit;
}

void listener_enqueue(struct listener *l, struct stream *s)
{
	if (l->tail)
		l->tail->accept_next = s;
	else
		l->head = s;
	l->tail = s;
	l->queued++;
	stream_ready(l->file, EPOLLIN, EPOLLIN);
}

void listener_forget_all(void)
{
	while (listeners) {
		struct listener *l = listeners;
		listeners = l->next;
		while (l->offers) {
			struct listener_offer *o = l->offers;
			l->offers = o->next;
			free(o);
		}
		free(l);
	}
}

size_t listener_stat_fill(struct listener_stat *out, size_t cap)
{
	size_t n = 0;
	for (const struct listener *l = listeners; l; l = l->next, n++) {
		if (n >= cap)
			continue;
		unsigned offers = 0;
		for (const struct listener_offer *o = l->offers; o; o = o->next)
			offers++;
		out[n] = (struct listener_stat){.queued = l->queued,
						.offers = offers,
						.backlog = l->backlog,
						.shared = l->shared,
						.file = l->file};
		memcpy(&out[n].addr, &l->addr, l->addr_len);
	}
	return n;
}
