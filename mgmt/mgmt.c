/*
 * The management thread. Everything below the command queue (listeners,
 * pending connects, sessions, peers) belongs to the thread alone, so none of
 * it is locked; other threads reach it only through commands. An endpoint's
 * lock is taken around each rpc call and never held across poll().
 *
 * The tables are linked lists: a process has a handful of peers and
 * sessions (sessions are cached and shared by every stream), so a scan is
 * cheaper than keeping a hash in step.
 */
#include "mgmt/mgmt.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "mgmt/mgmt_net.h"
#include "mgmt/mgmt_wire.h"
#include "transport/clock.h"
#include "transport/config.h"
#include "transport/log.h"
#include "transport/nic.h"
#include "transport/pkthdr.h"
#include "transport/rpc.h"
#include "transport/stats.h"

#define MS 1000000ull
/* First CONNECT_REQ retry; doubles up to the cap. */
#define RETRY_FIRST_NS (10 * MS)
#define RETRY_MAX_NS (200 * MS)
/* How long a closed server session still answers a retried CONNECT_REQ by
 * staying silent instead of making a second session. */
#define TOMBSTONE_NS (10000 * MS)
#define RX_BUDGET 64

struct mpeer {
	struct mpeer *next;
	uint64_t uuid;
	struct mgmt_addr addr; /* its control socket, once a PING showed it */
	bool addr_from_ping;
	uint64_t last_heard_ns;
	uint64_t next_ping_ns;
	unsigned nsessions;
};

struct msess {
	struct msess *next;
	struct rpc *rpc;
	int session;
	uint64_t token;
	uint64_t peer_uuid;
	struct mpeer *peer; /* NULL once closed */
	bool client;
	bool up;
	uint64_t closed_ns;
	struct mgmt_addr rendezvous; /* client: the address dialled */
	uint8_t resp[MGMT_WIRE_MAX_SIZE]; /* server: the answer, for retried requests */
	size_t resp_len;
};

struct waiter {
	struct waiter *next;
	mgmt_connect_fn fn;
	void *ctx;
	uint64_t deadline_ns;
};

struct pending {
	struct pending *next;
	struct rpc *rpc;
	struct mgmt_addr addr;
	uint64_t token;
	int session;
	uint32_t max_data;
	uint64_t next_try_ns;
	uint64_t backoff_ns;
	struct waiter *waiters;
};

struct listener {
	struct listener *next;
	int fd;
	struct rpc *rpc;
	struct mgmt_addr asked, bound;
};

enum cmd_type { CMD_LISTEN, CMD_UNLISTEN, CMD_LISTEN_PORT, CMD_CONNECT, CMD_DISCONNECT, CMD_FORGET };

struct cmd {
	struct cmd *next;
	struct mgmt *m;
	enum cmd_type type;
	struct rpc *rpc;
	struct mgmt_addr addr;
	int session;
	unsigned timeout_ms;
	mgmt_connect_fn fn;
	void *ctx;
	bool sync; /* on the caller's stack; the caller waits for done */
	bool done;
	int result;
};

struct mgmt {
	const struct ferry_config *cfg;
	struct ferry_stats *stats;
	uint64_t uuid;
	pthread_t thread;
	int evfd;
	int ctl4, ctl6;

	pthread_mutex_t mu; /* guards the queue, stop and every sync cmd's done/result */
	pthread_cond_t cv;
	struct cmd *queue, **queue_tail;
	bool stop;

	struct listener *listeners;
	size_t nlisteners;
	struct pollfd *pfd; /* poll set, rebuilt each turn */
	struct listener **pfd_owner;
	size_t pfd_cap;
	struct pending *pendings;
	struct msess *sessions;
	struct mpeer *peers;
	uint64_t next_sweep_ns;
};

/* ---- small helpers ---- */

static int ctl_fd(struct mgmt *m, const struct mgmt_addr *a)
{
	return mgmt_addr_family(a) == AF_INET6 ? m->ctl6 : m->ctl4;
}

static int send_msg(struct mgmt *m, int fd, const struct mgmt_msg *msg, const struct sockaddr *to,
		    socklen_t tolen)
{
	uint8_t buf[MGMT_WIRE_MAX_SIZE];
	size_t len = mgmt_wire_encode(msg, buf);
	if (fd < 0)
		return -EAFNOSUPPORT;
	return mgmt_net_send(fd, buf, len, to, tolen);
}

static void send_ctl(struct mgmt *m, enum mgmt_msg_type type, uint64_t token,
		     const struct mgmt_addr *to)
{
	struct mgmt_msg msg = {.type = type, .token = token, .uuid = m->uuid};
	send_msg(m, ctl_fd(m, to), &msg, (const struct sockaddr *)&to->ss, to->len);
}

/* Payload per packet the path to a allows: the udp datapath's packets go
 * where the management channel's do, so its route MTU is theirs. */
static uint32_t path_data_max(struct mgmt *m, const struct nic_route *local,
			      const struct mgmt_addr *a)
{
	if (local->kind != FERRY_TRANSPORT_UDP || m->cfg->mtu != 0)
		return UINT32_MAX;
	uint32_t pkt = mgmt_net_udp_payload_max(a);
	if (pkt == 0)
		return UINT32_MAX;
	/* Below the minimum every session supports, IP fragments instead. */
	return pkt > PKTHDR_SIZE + RPC_MIN_PKT_DATA ? pkt - PKTHDR_SIZE : RPC_MIN_PKT_DATA;
}

static uint32_t min32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

/* ---- peers ---- */

static struct mpeer *peer_find(struct mgmt *m, uint64_t uuid)
{
	for (struct mpeer *p = m->peers; p; p = p->next)
		if (p->uuid == uuid)
			return p;
	return NULL;
}

/* The peer's record, made on its first session; seen is where it spoke from. */
static struct mpeer *peer_get(struct mgmt *m, uint64_t uuid, const struct mgmt_addr *seen,
			      uint64_t now)
{
	struct mpeer *p = peer_find(m, uuid);
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return NULL;
		p->uuid = uuid;
		p->next = m->peers;
		m->peers = p;
		p->next_ping_ns = now + (uint64_t)m->cfg->heartbeat_ms * MS;
	}
	if (!p->addr_from_ping)
		p->addr = *seen;
	if (p->nsessions == 0)
		p->last_heard_ns = now;
	return p;
}

static void peer_free(struct mgmt *m, struct mpeer *p)
{
	for (struct mpeer **pp = &m->peers; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			free(p);
			return;
		}
	}
}

/* ---- sessions ---- */

static struct msess *sess_add(struct mgmt *m, struct rpc *rpc, int session, uint64_t token,
			      struct mpeer *peer, bool client)
{
	struct msess *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->rpc = rpc;
	s->session = session;
	s->token = token;
	s->peer_uuid = peer->uuid;
	s->peer = peer;
	s->client = client;
	s->up = true;
	peer->nsessions++;
	s->next = m->sessions;
	m->sessions = s;
	stats_inc(m->stats->sessions);
	return s;
}

static void sess_unlink(struct mgmt *m, struct msess *s)
{
	for (struct msess **pp = &m->sessions; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			return;
		}
	}
}

/*
 * Ends a live session: resets it in the endpoint (unless the endpoint
 * already reused the number for another session), tells the peer when
 * notify, and forgets the peer once nothing is shared with it. A server
 * session stays as a tombstone so a late retried CONNECT_REQ cannot raise
 * it again. The record may be freed: callers must not touch it after.
 */
static void sess_close(struct mgmt *m, struct msess *s, int err, bool notify, uint64_t now)
{
	if (!s->up)
		return;
	rpc_lock(s->rpc);
	if (rpc_session_token(s->rpc, s->session) == s->token)
		rpc_session_reset(s->rpc, s->session, err);
	rpc_unlock(s->rpc);
	struct mpeer *p = s->peer;
	if (notify)
		send_ctl(m, MGMT_DISCONNECT, s->token, &p->addr);
	s->up = false;
	s->peer = NULL;
	s->closed_ns = now;
	stats_inc(m->stats->sessions_closed);
	if (--p->nsessions == 0)
		peer_free(m, p);
	if (s->client) {
		sess_unlink(m, s);
		free(s);
	}
}

static struct msess *sess_find_token(struct mgmt *m, uint64_t peer_uuid, uint64_t token)
{
	for (struct msess *s = m->sessions; s; s = s->next)
		if (s->up && s->token == token && s->peer_uuid == peer_uuid)
			return s;
	return NULL;
}

/* Whether the endpoint still holds the session mgmt made (it may have reset
 * it on its own, e.g. at rpc_destroy or on the application's request). */
static bool sess_alive(struct msess *s)
{
	rpc_lock(s->rpc);
	bool ok = rpc_session_is_up(s->rpc, s->session) &&
		  rpc_session_token(s->rpc, s->session) == s->token;
	rpc_unlock(s->rpc);
	return ok;
}

/* ---- connects (client side) ---- */

static void waiter_done(struct waiter *w, int result)
{
	w->fn(w->ctx, result);
	free(w);
}

static void pending_unlink(struct mgmt *m, struct pending *p)
{
	for (struct pending **pp = &m->pendings; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			return;
		}
	}
}

/* Completes every waiter with result, and frees the attempt. */
static void pending_finish(struct mgmt *m, struct pending *p, int result)
{
	if (result < 0 && p->session >= 0) {
		rpc_lock(p->rpc);
		if (rpc_session_token(p->rpc, p->session) == p->token)
			rpc_session_reset(p->rpc, p->session, result);
		rpc_unlock(p->rpc);
	}
	pending_unlink(m, p);
	while (p->waiters) {
		struct waiter *w = p->waiters;
		p->waiters = w->next;
		waiter_done(w, result);
	}
	free(p);
}

static void pending_send(struct mgmt *m, struct pending *p, uint64_t now)
{
	struct mgmt_msg req = {.type = MGMT_CONNECT_REQ, .token = p->token, .uuid = m->uuid,
			       .session = (uint16_t)p->session, .data_per_pkt = p->max_data};
	rpc_lock(p->rpc);
	rpc_local_route(p->rpc, &req.route);
	rpc_unlock(p->rpc);
	int rc = send_msg(m, ctl_fd(m, &p->addr), &req, (const struct sockaddr *)&p->addr.ss,
			  p->addr.len);
	p->next_try_ns = now + p->backoff_ns;
	p->backoff_ns = p->backoff_ns * 2 < RETRY_MAX_NS ? p->backoff_ns * 2 : RETRY_MAX_NS;
	/* A full send buffer is a lost datagram; the retry covers it. What
	 * remains is the kernel saying the address cannot be reached at all. */
	if (rc < 0 && rc != -EAGAIN && rc != -ENOBUFS && rc != -EINTR)
		pending_finish(m, p, rc);
}

static void connect_start(struct mgmt *m, struct rpc *rpc, const struct mgmt_addr *addr,
			  struct waiter *w, uint64_t now)
{
	for (struct msess *s = m->sessions; s; s = s->next) {
		if (!s->up || !s->client || s->rpc != rpc || !mgmt_addr_equal(&s->rendezvous, addr))
			continue;
		if (sess_alive(s)) {
			waiter_done(w, s->session);
			return;
		}
		sess_close(m, s, -ECONNRESET, true, now);
		break;
	}
	for (struct pending *p = m->pendings; p; p = p->next) {
		if (p->rpc == rpc && mgmt_addr_equal(&p->addr, addr)) {
			w->next = p->waiters;
			p->waiters = w;
			return;
		}
	}
	if (ctl_fd(m, addr) < 0) {
		waiter_done(w, -EAFNOSUPPORT);
		return;
	}
	struct pending *p = calloc(1, sizeof(*p));
	if (!p) {
		waiter_done(w, -ENOMEM);
		return;
	}
	p->rpc = rpc;
	p->addr = *addr;
	p->token = mgmt_net_random64();
	p->backoff_ns = RETRY_FIRST_NS;
	p->waiters = w;
	struct nic_route local;
	rpc_lock(p->rpc);
	p->session = rpc_session_create(p->rpc, p->token);
	rpc_local_route(p->rpc, &local);
	p->max_data = rpc_max_pkt_data(p->rpc);
	rpc_unlock(p->rpc);
	p->next = m->pendings;
	m->pendings = p;
	if (p->session < 0) {
		pending_finish(m, p, p->session);
		return;
	}
	p->max_data = min32(p->max_data, path_data_max(m, &local, &p->addr));
	pending_send(m, p, now);
}

static struct pending *pending_find_token(struct mgmt *m, uint64_t token)
{
	for (struct pending *p = m->pendings; p; p = p->next)
		if (p->token == token)
			return p;
	return NULL;
}

static void on_connect_resp(struct mgmt *m, const struct mgmt_msg *msg, const struct mgmt_addr *from,
			    uint64_t now)
{
	struct pending *p = pending_find_token(m, msg->token);
	if (!p) {
		/* A retried request's second answer, or an answer after we gave
		 * up: in the latter case the server holds a session nobody
		 * uses, so tell it. */
		if (msg->status == 0 && !sess_find_token(m, msg->uuid, msg->token))
			send_ctl(m, MGMT_DISCONNECT, msg->token, from);
		return;
	}
	if (msg->status != 0) {
		pending_finish(m, p, -msg->status);
		return;
	}
	struct mpeer *peer = peer_get(m, msg->uuid, from, now);
	if (!peer) {
		send_ctl(m, MGMT_DISCONNECT, msg->token, from);
		pending_finish(m, p, -ENOMEM);
		return;
	}
	int rc = -EPROTO;
	struct nic_route route = msg->route;
	rpc_lock(p->rpc);
	struct nic_route local;
	rpc_local_route(p->rpc, &local);
	if (route.kind == local.kind && msg->data_per_pkt >= RPC_MIN_PKT_DATA &&
	    msg->data_per_pkt <= p->max_data) {
		nic_route_fixup(rpc_nic(p->rpc), &route, (const struct sockaddr *)&from->ss, from->len);
		rc = rpc_session_connect(p->rpc, p->session, &route, msg->session, msg->data_per_pkt);
	}
	rpc_unlock(p->rpc);
	struct msess *s = rc == 0 ? sess_add(m, p->rpc, p->session, p->token, peer, true) : NULL;
	if (!s) {
		if (peer->nsessions == 0)
			peer_free(m, peer);
		send_ctl(m, MGMT_DISCONNECT, msg->token, from);
		pending_finish(m, p, rc < 0 ? rc : -ENOMEM);
		return;
	}
	s->rendezvous = p->addr;
	log_debug("mgmt: session %d up to peer %016llx (%u bytes per packet)", s->session,
		  (unsigned long long)msg->uuid, msg->data_per_pkt);
	pending_finish(m, p, s->session);
}

/* An ICMP error for a datagram sent to dest: fails the attempt at dest. */
static void on_icmp_error(struct mgmt *m, const struct mgmt_addr *dest, int err)
{
	if (err != ECONNREFUSED && err != EHOSTUNREACH && err != ENETUNREACH)
		return;
	for (struct pending *p = m->pendings; p; p = p->next) {
		if (mgmt_addr_equal(&p->addr, dest)) {
			pending_finish(m, p, -err);
			return;
		}
	}
}

/* ---- answers (server side) ---- */

static struct msess *sess_find_server(struct mgmt *m, uint64_t uuid, uint64_t token)
{
	for (struct msess *s = m->sessions; s; s = s->next)
		if (!s->client && s->token == token && s->peer_uuid == uuid)
			return s;
	return NULL;
}

static void on_connect_req(struct mgmt *m, struct listener *l, const struct mgmt_msg *msg,
			   const struct sockaddr *src, socklen_t srclen, const struct mgmt_addr *from,
			   uint64_t now)
{
	struct msess *dup = sess_find_server(m, msg->uuid, msg->token);
	if (dup) {
		if (dup->up)
			mgmt_net_send(l->fd, dup->resp, dup->resp_len, src, srclen);
		return;
	}
	if (msg->token == 0) {
		stats_inc(m->stats->mgmt_drops);
		return;
	}
	struct mgmt_msg resp = {.type = MGMT_CONNECT_RESP, .token = msg->token, .uuid = m->uuid};
	struct nic_route local;
	rpc_lock(l->rpc);
	rpc_local_route(l->rpc, &local);
	uint32_t max = rpc_max_pkt_data(l->rpc);
	rpc_unlock(l->rpc);
	resp.route = local;

	int session = -1, rc = 0;
	if (msg->route.kind != local.kind)
		rc = -EPROTONOSUPPORT;
	else if (msg->data_per_pkt < RPC_MIN_PKT_DATA)
		rc = -EINVAL;
	struct mpeer *peer = rc ? NULL : peer_get(m, msg->uuid, from, now);
	if (!rc && !peer)
		rc = -ENOMEM;
	if (!rc) {
		uint32_t agreed = min32(min32(msg->data_per_pkt, max), path_data_max(m, &local, from));
		struct nic_route route = msg->route;
		rpc_lock(l->rpc);
		session = rpc_session_create(l->rpc, msg->token);
		if (session >= 0) {
			nic_route_fixup(rpc_nic(l->rpc), &route, (const struct sockaddr *)&from->ss,
					from->len);
			rc = rpc_session_connect(l->rpc, session, &route, msg->session, agreed);
			if (rc < 0)
				rpc_session_reset(l->rpc, session, rc);
		} else {
			rc = session;
		}
		rpc_unlock(l->rpc);
		resp.session = (uint16_t)(session >= 0 ? session : 0);
		resp.data_per_pkt = agreed;
	}
	struct msess *s = NULL;
	if (!rc) {
		s = sess_add(m, l->rpc, session, msg->token, peer, false);
		if (!s) {
			rpc_lock(l->rpc);
			rpc_session_reset(l->rpc, session, -ENOMEM);
			rpc_unlock(l->rpc);
			rc = -ENOMEM;
		}
	}
	if (peer && peer->nsessions == 0)
		peer_free(m, peer);
	resp.status = -rc;
	uint8_t buf[MGMT_WIRE_MAX_SIZE];
	size_t len = mgmt_wire_encode(&resp, buf);
	if (s) {
		memcpy(s->resp, buf, len);
		s->resp_len = len;
		log_debug("mgmt: session %d up for peer %016llx", session,
			  (unsigned long long)msg->uuid);
	}
	mgmt_net_send(l->fd, buf, len, src, srclen);
}

/* ---- datagrams ---- */

static void on_datagram(struct mgmt *m, int fd, struct listener *l, const uint8_t *buf, size_t len,
			const struct sockaddr *src, socklen_t srclen, uint64_t now)
{
	struct mgmt_msg msg;
	struct mgmt_addr from;
	if (mgmt_wire_decode(buf, len, &msg) < 0 || mgmt_addr_set(&from, src, srclen) < 0) {
		stats_inc(m->stats->mgmt_drops);
		return;
	}
	struct mpeer *peer = peer_find(m, msg.uuid);
	if (peer)
		peer->last_heard_ns = now;
	switch (msg.type) {
	case MGMT_CONNECT_REQ:
		if (!l) {
			stats_inc(m->stats->mgmt_drops);
			return;
		}
		on_connect_req(m, l, &msg, src, srclen, &from, now);
		break;
	case MGMT_CONNECT_RESP:
		on_connect_resp(m, &msg, &from, now);
		break;
	case MGMT_DISCONNECT: {
		struct msess *s = sess_find_token(m, msg.uuid, msg.token);
		if (s)
			sess_close(m, s, -ENOTCONN, false, now);
		break;
	}
	case MGMT_PING: {
		/* Silence towards a process we share nothing with (or declared
		 * dead) lets it reach the same verdict about us. */
		if (!peer)
			return;
		peer->addr = from;
		peer->addr_from_ping = true;
		struct mgmt_msg pong = {.type = MGMT_PONG, .uuid = m->uuid};
		send_msg(m, fd, &pong, src, srclen);
		break;
	}
	case MGMT_PONG:
		break;
	}
}

static void sock_drain(struct mgmt *m, int fd, struct listener *l, short revents, uint64_t now)
{
	if (revents & POLLERR) {
		struct mgmt_addr dest;
		int err;
		while (mgmt_net_read_error(fd, &dest, &err) > 0)
			on_icmp_error(m, &dest, err);
		/* The ICMP error also sits in SO_ERROR; clear it or poll keeps
		 * reporting POLLERR. */
		int soerr;
		socklen_t sl = sizeof(soerr);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
	}
	if (!(revents & POLLIN))
		return;
	for (int i = 0; i < RX_BUDGET; i++) {
		uint8_t buf[512];
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		ssize_t n = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&ss, &sl);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			continue; /* EINTR, or an ICMP error reported once here */
		}
		on_datagram(m, fd, l, buf, (size_t)n, (struct sockaddr *)&ss, sl, now);
	}
}

/* ---- timers ---- */

static void peer_dead(struct mgmt *m, struct mpeer *p, uint64_t now)
{
	log_warn("mgmt: peer %016llx silent for %u ms, declared dead; resetting its sessions",
		 (unsigned long long)p->uuid, m->cfg->failure_timeout_ms);
	stats_inc(m->stats->dead_peers);
	/* sess_close frees p with its last session; stop before touching it. */
	unsigned left = p->nsessions;
	struct msess *s = m->sessions;
	while (left > 0 && s) {
		struct msess *next = s->next;
		if (s->up && s->peer == p) {
			left--;
			sess_close(m, s, -ECONNRESET, false, now);
		}
		s = next;
	}
}

/* Closes sessions the endpoint dropped by itself, drops old tombstones. */
static void sweep(struct mgmt *m, uint64_t now)
{
	struct msess *s = m->sessions;
	while (s) {
		struct msess *next = s->next;
		if (s->up && !sess_alive(s)) {
			sess_close(m, s, -ECONNRESET, true, now);
		} else if (!s->up && now - s->closed_ns > TOMBSTONE_NS) {
			sess_unlink(m, s);
			free(s);
		}
		s = next;
	}
}

/* Runs what is due; returns the poll timeout in ms until the next thing. */
static int timers(struct mgmt *m, uint64_t now)
{
	uint64_t next = now + 1000 * MS;
	const uint64_t fail_ns = (uint64_t)m->cfg->failure_timeout_ms * MS;
	const uint64_t beat_ns = (uint64_t)m->cfg->heartbeat_ms * MS;

	struct pending *p = m->pendings;
	while (p) {
		struct pending *pnext = p->next;
		for (struct waiter **wp = &p->waiters; *wp;) {
			struct waiter *w = *wp;
			if (now >= w->deadline_ns) {
				*wp = w->next;
				waiter_done(w, -ETIMEDOUT);
			} else {
				if (w->deadline_ns < next)
					next = w->deadline_ns;
				wp = &w->next;
			}
		}
		if (!p->waiters)
			pending_finish(m, p, -ETIMEDOUT);
		else if (now >= p->next_try_ns)
			pending_send(m, p, now);
		p = pnext;
	}
	for (p = m->pendings; p; p = p->next)
		if (p->next_try_ns < next)
			next = p->next_try_ns;

	struct mpeer *peer = m->peers;
	while (peer) {
		struct mpeer *pnext = peer->next;
		if (now - peer->last_heard_ns >= fail_ns) {
			peer_dead(m, peer, now);
		} else {
			if (now >= peer->next_ping_ns) {
				send_ctl(m, MGMT_PING, 0, &peer->addr);
				peer->next_ping_ns = now + beat_ns;
			}
			if (peer->next_ping_ns < next)
				next = peer->next_ping_ns;
			if (peer->last_heard_ns + fail_ns < next)
				next = peer->last_heard_ns + fail_ns;
		}
		peer = pnext;
	}

	if (m->sessions) {
		if (now >= m->next_sweep_ns) {
			sweep(m, now);
			m->next_sweep_ns = now + beat_ns;
		}
		if (m->next_sweep_ns < next)
			next = m->next_sweep_ns;
	}
	return (int)((next - now + MS - 1) / MS);
}

/* ---- commands ---- */

static struct listener *listener_find(struct mgmt *m, const struct mgmt_addr *a)
{
	for (struct listener *l = m->listeners; l; l = l->next)
		if (mgmt_addr_equal(&l->asked, a) || mgmt_addr_equal(&l->bound, a))
			return l;
	return NULL;
}

static int cmd_listen(struct mgmt *m, struct cmd *c)
{
	/* Port 0 asks for a fresh port each time; a named port we already
	 * hold would bind again only through SO_REUSEADDR, which we do not set. */
	if (mgmt_addr_port(&c->addr) != 0 && listener_find(m, &c->addr))
		return -EADDRINUSE;
	struct listener *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->fd = mgmt_net_socket(mgmt_addr_family(&c->addr), &c->addr, false);
	if (l->fd < 0) {
		int err = l->fd;
		free(l);
		return err;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockname(l->fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    mgmt_addr_set(&l->bound, (struct sockaddr *)&ss, sl) < 0)
		l->bound = c->addr;
	l->asked = c->addr;
	l->rpc = c->rpc;
	l->next = m->listeners;
	m->listeners = l;
	m->nlisteners++;
	return 0;
}

static void listener_close(struct mgmt *m, struct listener **lp)
{
	struct listener *l = *lp;
	*lp = l->next;
	close(l->fd);
	free(l);
	m->nlisteners--;
}

static int cmd_unlisten(struct mgmt *m, struct cmd *c)
{
	for (struct listener **lp = &m->listeners; *lp; lp = &(*lp)->next) {
		struct listener *l = *lp;
		if (mgmt_addr_equal(&l->asked, &c->addr) || mgmt_addr_equal(&l->bound, &c->addr)) {
			listener_close(m, lp);
			return 0;
		}
	}
	return -ENOENT;
}

static void cmd_disconnect(struct mgmt *m, struct cmd *c, uint64_t now)
{
	for (struct msess *s = m->sessions; s; s = s->next) {
		if (s->up && s->rpc == c->rpc && s->session == c->session) {
			sess_close(m, s, -ENOTCONN, true, now);
			return;
		}
	}
}

/* Drops every trace of rpc: its listeners, attempts and sessions (closed
 * on both sides), so the endpoint can be destroyed. */
static void cmd_forget(struct mgmt *m, struct cmd *c, uint64_t now)
{
	for (struct listener **lp = &m->listeners; *lp;) {
		if ((*lp)->rpc == c->rpc)
			listener_close(m, lp);
		else
			lp = &(*lp)->next;
	}
	struct pending *p = m->pendings;
	while (p) {
		struct pending *next = p->next;
		if (p->rpc == c->rpc)
			pending_finish(m, p, -ECANCELED);
		p = next;
	}
	struct msess *s = m->sessions;
	while (s) {
		struct msess *next = s->next;
		if (s->rpc == c->rpc) {
			sess_close(m, s, -ENOTCONN, true, now);
			if (!s->client) { /* a tombstone pointing at a dead endpoint */
				sess_unlink(m, s);
				free(s);
			}
		}
		s = next;
	}
}

static void cmd_finish(struct mgmt *m, struct cmd *c)
{
	if (c->sync) {
		pthread_mutex_lock(&m->mu);
		c->done = true;
		pthread_cond_broadcast(&m->cv);
		pthread_mutex_unlock(&m->mu);
	} else {
		c->fn(c->ctx, c->result); /* only connects are queued without waiting */
		free(c);
	}
}

static void sync_connect_done(void *ctx, int result)
{
	struct cmd *c = ctx;
	c->result = result;
	cmd_finish(c->m, c);
}

/* Runs c on the management thread. Returns true when c is finished (result
 * set); a connect finishes later through its waiter, and c must not be
 * touched after cmd_run returns false (it may be gone). */
static bool cmd_run(struct mgmt *m, struct cmd *c, uint64_t now)
{
	struct listener *l;
	switch (c->type) {
	case CMD_LISTEN:
		c->result = cmd_listen(m, c);
		return true;
	case CMD_UNLISTEN:
		c->result = cmd_unlisten(m, c);
		return true;
	case CMD_LISTEN_PORT:
		l = listener_find(m, &c->addr);
		c->result = l ? mgmt_addr_port(&l->bound) : 0;
		return true;
	case CMD_DISCONNECT:
		cmd_disconnect(m, c, now);
		c->result = 0;
		return true;
	case CMD_FORGET:
		cmd_forget(m, c, now);
		c->result = 0;
		return true;
	case CMD_CONNECT:
		break;
	}
	struct waiter *w = calloc(1, sizeof(*w));
	if (!w) {
		c->result = -ENOMEM;
		return true;
	}
	w->fn = c->sync ? sync_connect_done : c->fn;
	w->ctx = c->sync ? (void *)c : c->ctx;
	w->deadline_ns = now + (uint64_t)c->timeout_ms * MS;
	bool async = !c->sync;
	struct mgmt_addr addr = c->addr;
	struct rpc *rpc = c->rpc;
	if (async)
		free(c);
	connect_start(m, rpc, &addr, w, now);
	return false;
}

/* Set on the management thread: a blocking call from there would wait on itself. */
static __thread struct mgmt *mgmt_self;

/* Takes the queue; returns false when asked to stop. */
static bool commands(struct mgmt *m)
{
	uint64_t v;
	while (read(m->evfd, &v, sizeof(v)) > 0) {
	}
	pthread_mutex_lock(&m->mu);
	struct cmd *c = m->queue;
	m->queue = NULL;
	m->queue_tail = &m->queue;
	bool stop = m->stop;
	pthread_mutex_unlock(&m->mu);
	while (c) {
		struct cmd *next = c->next;
		if (stop) {
			c->result = -ECANCELED;
			cmd_finish(m, c);
		} else if (cmd_run(m, c, clock_now_ns())) {
			cmd_finish(m, c);
		}
		c = next;
	}
	return !stop;
}

/* ---- the thread ---- */

static void shutdown_all(struct mgmt *m)
{
	while (m->pendings)
		pending_finish(m, m->pendings, -ECANCELED);
	while (m->sessions) {
		struct msess *s = m->sessions;
		m->sessions = s->next;
		if (s->up) {
			send_ctl(m, MGMT_DISCONNECT, s->token, &s->peer->addr);
			stats_inc(m->stats->sessions_closed);
		}
		free(s);
	}
	while (m->peers) {
		struct mpeer *p = m->peers;
		m->peers = p->next;
		free(p);
	}
	while (m->listeners)
		listener_close(m, &m->listeners);
	free(m->pfd);
	free(m->pfd_owner);
}

/* Fills m->pfd with every socket; returns the count (0 on -ENOMEM). */
static nfds_t poll_set(struct mgmt *m)
{
	size_t want = 3 + m->nlisteners;
	if (want > m->pfd_cap) {
		struct pollfd *pfd = realloc(m->pfd, want * sizeof(*pfd));
		if (pfd)
			m->pfd = pfd;
		struct listener **own = realloc(m->pfd_owner, want * sizeof(*own));
		if (own)
			m->pfd_owner = own;
		if (!pfd || !own)
			return 0;
		m->pfd_cap = want;
	}
	nfds_t n = 0;
	int fixed[3] = {m->evfd, m->ctl4, m->ctl6};
	for (int i = 0; i < 3; i++) {
		if (fixed[i] < 0)
			continue;
		m->pfd[n] = (struct pollfd){.fd = fixed[i], .events = POLLIN};
		m->pfd_owner[n++] = NULL;
	}
	for (struct listener *l = m->listeners; l; l = l->next) {
		m->pfd[n] = (struct pollfd){.fd = l->fd, .events = POLLIN};
		m->pfd_owner[n++] = l;
	}
	return n;
}

static void *mgmt_main(void *arg)
{
	struct mgmt *m = arg;
	mgmt_self = m;
	for (;;) {
		if (!commands(m))
			break;
		int timeout = timers(m, clock_now_ns());
		nfds_t n = poll_set(m);
		if (n == 0) {
			struct pollfd ev = {.fd = m->evfd, .events = POLLIN};
			poll(&ev, 1, timeout < 10 ? timeout : 10);
			continue;
		}
		if (poll(m->pfd, n, timeout) <= 0)
			continue;
		uint64_t now = clock_now_ns();
		for (nfds_t i = 1; i < n; i++)
			if (m->pfd[i].revents)
				sock_drain(m, m->pfd[i].fd, m->pfd_owner[i], m->pfd[i].revents, now);
	}
	shutdown_all(m);
	return NULL;
}

/* ---- the API ---- */

/* Queues c and, if it is sync, waits for it. Returns c's result for sync
 * commands, 0 for queued async ones, -ESHUTDOWN once stopping. */
static int submit(struct mgmt *m, struct cmd *c)
{
	pthread_mutex_lock(&m->mu);
	if (m->stop) {
		pthread_mutex_unlock(&m->mu);
		return -ESHUTDOWN;
	}
	c->next = NULL;
	*m->queue_tail = c;
	m->queue_tail = &c->next;
	uint64_t one = 1;
	ssize_t wr = write(m->evfd, &one, sizeof(one));
	(void)wr; /* only fails when the counter is already huge: still readable */
	if (!c->sync) {
		pthread_mutex_unlock(&m->mu);
		return 0;
	}
	while (!c->done)
		pthread_cond_wait(&m->cv, &m->mu);
	pthread_mutex_unlock(&m->mu);
	return c->result;
}

/* Commands other than a blocking connect run inline when the management
 * thread itself asks (from a connect callback), since it cannot wait on
 * its own queue. */
static int run_sync(struct mgmt *m, struct cmd *c)
{
	if (mgmt_self == m) {
		cmd_run(m, c, clock_now_ns());
		return c->result;
	}
	c->sync = true;
	return submit(m, c);
}

struct mgmt *mgmt_create(const struct ferry_config *cfg, struct ferry_stats *stats, int *err,
			 char *msg, size_t msglen)
{
	struct mgmt *m = calloc(1, sizeof(*m));
	if (!m) {
		*err = -ENOMEM;
		snprintf(msg, msglen, "mgmt: out of memory");
		return NULL;
	}
	m->cfg = cfg;
	m->stats = stats;
	m->uuid = mgmt_net_random64();
	m->queue_tail = &m->queue;
	m->ctl4 = m->ctl6 = m->evfd = -1;
	pthread_mutex_init(&m->mu, NULL);
	pthread_cond_init(&m->cv, NULL);
	const char *what = "eventfd";
	m->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int rc = m->evfd < 0 ? -errno : 0;
	if (!rc) {
		what = "the IPv4 control socket";
		m->ctl4 = mgmt_net_socket(AF_INET, NULL, true);
		rc = m->ctl4 < 0 ? m->ctl4 : 0;
	}
	if (!rc) {
		/* A host without IPv6 still works for IPv4 peers. */
		m->ctl6 = mgmt_net_socket(AF_INET6, NULL, true);
		if (m->ctl6 < 0)
			m->ctl6 = -1;
		what = "the management thread";
		/* Signals are the application's: they must land on its threads. */
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		rc = -pthread_create(&m->thread, NULL, mgmt_main, m);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (rc) {
		*err = rc;
		snprintf(msg, msglen, "mgmt: cannot create %s: %s", what, strerror(-rc));
		if (m->ctl6 >= 0)
			close(m->ctl6);
		if (m->ctl4 >= 0)
			close(m->ctl4);
		if (m->evfd >= 0)
			close(m->evfd);
		pthread_cond_destroy(&m->cv);
		pthread_mutex_destroy(&m->mu);
		free(m);
		return NULL;
	}
	return m;
}

void mgmt_destroy(struct mgmt *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->mu);
	m->stop = true;
	uint64_t one = 1;
	ssize_t wr = write(m->evfd, &one, sizeof(one));
	(void)wr;
	pthread_mutex_unlock(&m->mu);
	pthread_join(m->thread, NULL);
	close(m->ctl4);
	if (m->ctl6 >= 0)
		close(m->ctl6);
	close(m->evfd);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	free(m);
}

uint64_t mgmt_uuid(const struct mgmt *m)
{
	return m->uuid;
}

static int cmd_init(struct mgmt *m, struct cmd *c, enum cmd_type type, struct rpc *rpc,
		    const struct sockaddr *addr, socklen_t len)
{
	memset(c, 0, sizeof(*c));
	c->m = m;
	c->type = type;
	c->rpc = rpc;
	return addr ? mgmt_addr_set(&c->addr, addr, len) : 0;
}

int mgmt_listen(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr, socklen_t len)
{
	struct cmd c;
	int rc = cmd_init(m, &c, CMD_LISTEN, rpc, addr, len);
	return rc ? rc : run_sync(m, &c);
}

int mgmt_unlisten(struct mgmt *m, const struct sockaddr *addr, socklen_t len)
{
	struct cmd c;
	int rc = cmd_init(m, &c, CMD_UNLISTEN, NULL, addr, len);
	return rc ? rc : run_sync(m, &c);
}

uint16_t mgmt_listen_port(struct mgmt *m, const struct sockaddr *addr, socklen_t len)
{
	struct cmd c;
	if (cmd_init(m, &c, CMD_LISTEN_PORT, NULL, addr, len))
		return 0;
	int rc = run_sync(m, &c);
	return rc > 0 ? (uint16_t)rc : 0;
}

int mgmt_connect(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr, socklen_t len,
		 unsigned timeout_ms)
{
	if (mgmt_self == m)
		return -EDEADLK;
	struct cmd c;
	int rc = cmd_init(m, &c, CMD_CONNECT, rpc, addr, len);
	if (rc)
		return rc;
	c.timeout_ms = timeout_ms;
	c.sync = true;
	return submit(m, &c);
}

int mgmt_connect_async(struct mgmt *m, struct rpc *rpc, const struct sockaddr *addr,
		       socklen_t len, unsigned timeout_ms, mgmt_connect_fn done, void *ctx)
{
	struct cmd *c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	int rc = cmd_init(m, c, CMD_CONNECT, rpc, addr, len);
	if (!rc) {
		c->timeout_ms = timeout_ms;
		c->fn = done;
		c->ctx = ctx;
		rc = submit(m, c);
	}
	if (rc)
		free(c);
	return rc;
}

void mgmt_disconnect(struct mgmt *m, struct rpc *rpc, int session)
{
	struct cmd c;
	cmd_init(m, &c, CMD_DISCONNECT, rpc, NULL, 0);
	c.session = session;
	run_sync(m, &c);
}

void mgmt_forget_rpc(struct mgmt *m, struct rpc *rpc)
{
	struct cmd c;
	cmd_init(m, &c, CMD_FORGET, rpc, NULL, 0);
	run_sync(m, &c);
}
