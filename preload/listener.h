/* Listeners: OPEN requests for a listening socket's address land in its
 * queue, where accept takes them. Under the endpoint lock. */
#ifndef FERRY_PRELOAD_LISTENER_H
#define FERRY_PRELOAD_LISTENER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "mgmt/mgmt.h"

struct ffile;
struct rpc;
struct stream;

/* A connection another process queued on a listener it let go of and
 * offered here (lshare.h): taken over once accepted. */
struct listener_offer {
	struct listener_offer *next;
	struct mgmt_offer o;
};

struct listener {
	struct sockaddr_storage addr;
	socklen_t addr_len;
	bool v6only; /* IPV6_V6ONLY: IPv4 peers belong to a listener beside it */
	uint16_t port;
	struct ffile *file;
	int backlog;
	int queued;
	struct stream *head, *tail;
	struct listener *next;
	/* Another process may hold it (lshare.h): once this one lets go, an
	 * OPEN that still comes here (a client's session leads here) is sent
	 * back to the rendezvous (-ESTALE), where another holder answers. */
	bool shared;
	struct listener_offer *offers, **offers_tail; /* accepted after the queue */
};

struct listener *listener_add(const struct sockaddr *addr, socklen_t len, int backlog,
			      struct ffile *file);
/* What a listener going away may hand on: each stream still queued goes to
 * stream (which takes the queue's reference and returns true) or is reset;
 * each offer not taken goes to offer. */
struct listener_keep {
	bool (*stream)(struct stream *s, void *arg);
	void (*offer)(const struct mgmt_offer *o, void *arg);
	void *arg;
};
/* Frees l, handing on what k takes (k may be NULL: everything is reset). */
void listener_remove(struct rpc *rpc, struct listener *l, const struct listener_keep *k);
struct stream *listener_pop(struct listener *l);
/* The listener for addr's family and port, or NULL. */
struct listener *listener_find(const struct sockaddr *addr);
/* Queues an offer (copied); readable from now. -ENOMEM. */
int listener_offer_add(struct listener *l, const struct mgmt_offer *o);
/* Takes the oldest offer into *out; false when none. */
bool listener_offer_pop(struct listener *l, struct mgmt_offer *out);

/* What ferry-stat shows of a listener. */
struct listener_stat {
	struct sockaddr_storage addr;
	int queued;      /* opens waiting for accept */
	unsigned offers; /* connections other holders offered, waiting too */
	int backlog;
	bool shared;     /* other processes may hold it (fork, SCM_RIGHTS) */
	struct ffile *file;
};
/* Describes up to cap listeners into out; returns how many there are. */
size_t listener_stat_fill(struct listener_stat *out, size_t cap);

#endif
