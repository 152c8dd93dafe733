/*
 * Sessions over the management channel: the handshake (client and server
 * side), duplicate suppression, peers, heartbeats and failure detection.
 * Runs on the management thread only (see mgmt_internal.h).
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgmt/mgmt_internal.h"
#include "transport/clock.h"
#include "transport/config.h"
#include "transport/log.h"
#include "transport/nic.h"
#include "transport/pkthdr.h"
#include "transport/rpc.h"
#include "transport/stats.h"
#include "transport/sys.h"

/* First CONNECT_REQ retry; doubles up to the cap. */
#define RETRY_FIRST_NS (10 * MGMT_MS)
#define RETRY_MAX_NS (200 * MGMT_MS)
/* How long a closed server session stays to recognise a late retried
 * CONNECT_REQ (and ignore it) instead of making a second session. */
#define TOMBSTONE_NS (10000 * MGMT_MS)

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

int mgmt_offer(struct mgmt *m, const struct sockaddr *addr, socklen_t len,
	       const struct mgmt_offer *o)
{
	struct mgmt_addr to;
	int rc = mgmt_addr_set(&to, addr, len);
	if (rc)
		return rc;
	/* A wildcard listener's rendezvous socket is reached on loopback. */
	if (to.ss.ss_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)&to.ss;
		if (in->sin_addr.s_addr == htonl(INADDR_ANY))
			in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&to.ss;
		if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
			in6->sin6_addr = in6addr_loopback;
	}
	struct mgmt_msg msg = {.type = MGMT_OFFER, .token = o->token, .uuid = m->uuid,
			       .pid = o->pid, .sid = o->sid, .peer_sid = o->peer_sid};
	uint8_t buf[MGMT_WIRE_MAX_SIZE];
	size_t n = mgmt_wire_encode(&msg, buf);
	int fd = ctl_fd(m, &to);
	return fd < 0 ? -EAFNOSUPPORT : mgmt_net_send(fd, buf, n, (struct sockaddr *)&to.ss, to.len);
}

void mgmt_set_offer_handler(struct mgmt *m, mgmt_offer_fn fn, void *ctx)
{
	m->offer_ctx = ctx;
	__atomic_store_n(&m->offer_fn, fn, __ATOMIC_RELEASE);
}

/* Ends the session with token at process peer_uuid, reached at to. */
static void send_disconnect(struct mgmt *m, uint64_t token, uint64_t peer_uuid,
			    const struct mgmt_addr *to)
{
	struct mgmt_msg msg = {.type = MGMT_DISCONNECT, .token = token, .uuid = m->uuid,
			       .to = peer_uuid};
	send_msg(m, ctl_fd(m, to), &msg, (const struct sockaddr *)&to->ss, to->len);
}

/* How long a route's MTU is taken as known. */
#define MGMT_MTU_KEEP_NS (1000ull * MGMT_MS)

/* Payload per packet the path to a allows: the udp datapath's packets go
 * where the management channel's do, so its route MTU is theirs. */
static uint32_t path_data_max(struct mgmt *m, const struct nic_route *local,
			      const struct mgmt_addr *a)
{
	if (local->kind != FERRY_TRANSPORT_UDP || m->cfg->mtu != 0)
		return UINT32_MAX;
	/* The route's MTU is the host's, whatever the port; asked again after
	 * a while, as a path's MTU may change. */
	struct mgmt_addr host = *a;
	if (host.ss.ss_family == AF_INET)
		((struct sockaddr_in *)(void *)&host.ss)->sin_port = 0;
	else if (host.ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)(void *)&host.ss)->sin6_port = 0;
	uint64_t now = clock_now_ns();
	uint32_t pkt;
	if (m->mtu.at_ns && now - m->mtu.at_ns < MGMT_MTU_KEEP_NS && mgmt_addr_equal(&host, &m->mtu.host)) {
		pkt = m->mtu.pkt;
	} else {
		pkt = mgmt_net_udp_payload_max(a);
		m->mtu = (struct mgmt_mtu){.host = host, .pkt = pkt, .at_ns = now};
	}
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

/* Watches a new peer's process when it lives on this host. */
static void peer_watch(struct mgmt *m, struct mpeer *p, const struct mgmt_proc *proc)
{
	int fd = mgmt_proc_watch(&m->self, proc);
	if (fd >= 0) {
		p->pidfd = fd;
		m->npidfds++;
	} else if (fd == -ESRCH) {
		p->gone = true; /* exited between its message and now */
	} else if (fd != -EREMOTE) {
		log_debug("mgmt: cannot watch peer process %u (%d); its silence counts", proc->pid,
			  fd);
	}
}

/* The peer's record, made on its first session; seen is where it spoke
 * from, proc who it says it is. */
static struct mpeer *peer_get(struct mgmt *m, uint64_t uuid, const struct mgmt_addr *seen,
			      const struct mgmt_proc *proc, uint64_t now)
{
	struct mpeer *p = peer_find(m, uuid);
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return NULL;
		p->uuid = uuid;
		p->pidfd = -1;
		p->next = m->peers;
		m->peers = p;
		p->next_ping_ns = now + (uint64_t)m->cfg->heartbeat_ms * MGMT_MS;
		p->proc = *proc;
		p->watch_due = true;
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
			if (p->pidfd >= 0) {
				sys()->close(p->pidfd);
				m->npidfds--;
			}
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

static void tomb_add(struct mgmt *m, uint64_t peer_uuid, uint64_t token, uint64_t now)
{
	struct mtomb *t = calloc(1, sizeof(*t));
	if (!t)
		return; /* only a late retry could raise the session again */
	t->key.peer_uuid = peer_uuid;
	t->key.token = token;
	t->closed_ns = now;
	HASH_ADD(hh, m->tombs, key, sizeof(t->key), t);
	*m->tombs_tail = t;
	m->tombs_tail = &t->next;
}

static bool tomb_find(struct mgmt *m, uint64_t peer_uuid, uint64_t token)
{
	struct mgmt_tomb_key key = {.peer_uuid = peer_uuid, .token = token};
	struct mtomb *t;
	HASH_FIND(hh, m->tombs, &key, sizeof(key), t);
	return t != NULL;
}

/* Forgets tombstones closed before cutoff_ns (all of them: UINT64_MAX). */
static void tombs_expire(struct mgmt *m, uint64_t cutoff_ns)
{
	while (m->tombs_oldest && m->tombs_oldest->closed_ns < cutoff_ns) {
		struct mtomb *t = m->tombs_oldest;
		m->tombs_oldest = t->next;
		HASH_DEL(m->tombs, t);
		free(t);
	}
	if (!m->tombs_oldest)
		m->tombs_tail = &m->tombs_oldest;
}

/*
 * Ends a live session: resets it in the endpoint (unless the endpoint
 * already reused the number for another session), tells the peer when
 * notify, and forgets the peer once nothing is shared with it. A server
 * session leaves a tombstone so a late retried CONNECT_REQ cannot raise
 * it again. The record is freed: callers must not touch it after.
 */
static void sess_close(struct mgmt *m, struct msess *s, int err, bool notify, uint64_t now)
{
	/* Counted first: a thread that sees the reset's failed requests sees
	 * the close counted too. */
	stats_inc(m->stats->sessions_closed);
	rpc_lock(s->rpc);
	if (rpc_session_token(s->rpc, s->session) == s->token)
		rpc_session_reset(s->rpc, s->session, err);
	rpc_unlock(s->rpc);
	struct mpeer *p = s->peer;
	if (notify)
		send_disconnect(m, s->token, p->uuid, &p->addr);
	if (--p->nsessions == 0)
		peer_free(m, p);
	if (!s->client)
		tomb_add(m, s->peer_uuid, s->token, now);
	sess_unlink(m, s);
	free(s);
}

static struct msess *sess_find_token(struct mgmt *m, uint64_t peer_uuid, uint64_t token)
{
	for (struct msess *s = m->sessions; s; s = s->next)
		if (s->token == token && s->peer_uuid == peer_uuid)
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

/* rpc's live client session to peer for the rendezvous address addr. */
static struct msess *sess_find_twin(struct mgmt *m, struct rpc *rpc, const struct mpeer *peer,
				    const struct mgmt_addr *addr)
{
	for (struct msess *s = m->sessions; s; s = s->next)
		if (s->client && s->rpc == rpc && s->peer == peer &&
		    mgmt_addr_equal(&s->rendezvous, addr) && sess_alive(s))
			return s;
	return NULL;
}

/* The peer sent its last packets (a FIN, say) on the datapath before its
 * goodbye or its death, but whoever runs the endpoint reads them: take them
 * in first, or a clean close would look like a reset. */
static void sess_take_in(struct msess *s)
{
	rpc_lock(s->rpc);
	for (int i = 0; i < 64 && rpc_run_once(s->rpc); i++)
		;
	rpc_unlock(s->rpc);
}

/* ---- connects (client side) ---- */

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
		mgmt_waiter_done(m, w, result);
	}
	free(p);
}

static void pending_send(struct mgmt *m, struct pending *p, uint64_t now)
{
	struct mgmt_msg req = {.type = MGMT_CONNECT_REQ, .token = p->token, .uuid = m->uuid,
			       .session = (uint16_t)p->session, .data_per_pkt = p->max_data,
			       .proc = m->self};
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

void mgmt_connect_start(struct mgmt *m, struct rpc *rpc, const struct mgmt_addr *addr, unsigned flags,
			struct waiter *w, uint64_t now)
{
	mgmt_reach(m, rpc, addr);
	bool fresh = flags & MGMT_CONNECT_FRESH, another = flags & MGMT_CONNECT_ANOTHER;
	for (struct msess *s = m->sessions; s && !another; s = s->next) {
		if (!s->client || s->rpc != rpc || !mgmt_addr_equal(&s->rendezvous, addr))
			continue;
		if (fresh) {
			/* Kept for its streams, no longer reached by the address. */
			memset(&s->rendezvous, 0, sizeof(s->rendezvous));
			continue;
		}
		if (sess_alive(s)) {
			mgmt_waiter_done(m, w, s->session);
			return;
		}
		sess_close(m, s, -ECONNRESET, true, now);
		break;
	}
	for (struct pending *p = m->pendings; p && !another; p = p->next) {
		if (p->rpc == rpc && mgmt_addr_equal(&p->addr, addr)) {
			w->next = p->waiters;
			p->waiters = w;
			return;
		}
	}
	if (ctl_fd(m, addr) < 0) {
		mgmt_waiter_done(m, w, -EAFNOSUPPORT);
		return;
	}
	struct pending *p = calloc(1, sizeof(*p));
	if (!p) {
		mgmt_waiter_done(m, w, -ENOMEM);
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
			send_disconnect(m, msg->token, msg->uuid, from);
		return;
	}
	if (msg->status != 0) {
		pending_finish(m, p, -msg->status);
		return;
	}
	struct mpeer *peer = peer_get(m, msg->uuid, from, &msg->proc, now);
	if (!peer) {
		send_disconnect(m, msg->token, msg->uuid, from);
		pending_finish(m, p, -ENOMEM);
		return;
	}
	struct msess *twin = sess_find_twin(m, p->rpc, peer, &p->addr);
	if (twin) {
		/* A process we already have a session to (a look for another
		 * holder of a shared listener found the same one): one session
		 * per pair of processes. */
		send_disconnect(m, msg->token, msg->uuid, from);
		rpc_lock(p->rpc);
		if (rpc_session_token(p->rpc, p->session) == p->token)
			rpc_session_reset(p->rpc, p->session, -ECANCELED);
		rpc_unlock(p->rpc);
		pending_finish(m, p, twin->session);
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
		rpc_session_set_origin(p->rpc, p->session, (const struct sockaddr *)&from->ss,
				       from->len);
		rc = rpc_session_connect(p->rpc, p->session, &route, msg->session, msg->data_per_pkt);
	}
	rpc_unlock(p->rpc);
	struct msess *s = rc == 0 ? sess_add(m, p->rpc, p->session, p->token, peer, true) : NULL;
	if (!s) {
		if (peer->nsessions == 0)
			peer_free(m, peer);
		send_disconnect(m, msg->token, msg->uuid, from);
		pending_finish(m, p, rc < 0 ? rc : -ENOMEM);
		return;
	}
	s->rendezvous = p->addr;
	log_debug("mgmt: session %d up to peer %016llx (%u bytes per packet)", s->session,
		  (unsigned long long)msg->uuid, msg->data_per_pkt);
	pending_finish(m, p, s->session);
}

static void peer_dead(struct mgmt *m, struct mpeer *p, int err, uint64_t now);

void mgmt_on_icmp_error(struct mgmt *m, const struct mgmt_addr *dest, int err)
{
	if (err != ECONNREFUSED && err != EHOSTUNREACH && err != ENETUNREACH)
		return;
	for (struct pending *p = m->pendings; p; p = p->next) {
		if (mgmt_addr_equal(&p->addr, dest)) {
			pending_finish(m, p, -err);
			return;
		}
	}
	/* Nothing listens where a peer's management thread pinged us from:
	 * the process is gone (killed: it said no goodbye), and the kernel
	 * says so at our next ping, as it answers a dead TCP peer with a
	 * reset. Only a control socket's address tells (a rendezvous socket
	 * may outlive the process in another holder, or close while it lives). */
	if (err != ECONNREFUSED)
		return;
	for (struct mpeer *p = m->peers; p; p = p->next) {
		if (p->addr_from_ping && mgmt_addr_equal(&p->addr, dest)) {
			log_info("mgmt: peer %016llx is gone (its control port is closed); resetting "
				 "its sessions",
				 (unsigned long long)p->uuid);
			peer_dead(m, p, -EOWNERDEAD, clock_now_ns());
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

/* A handshake for endpoint rpc, answered on fd (a listener's rendezvous
 * socket, or a control socket: the next owner of a stream that moves here
 * from another process dials the peer's, see stream.h). */
static void on_connect_req(struct mgmt *m, struct rpc *rpc, int fd, const struct mgmt_msg *msg,
			   const struct sockaddr *src, socklen_t srclen, const struct mgmt_addr *from,
			   uint64_t now)
{
	struct msess *dup = sess_find_server(m, msg->uuid, msg->token);
	if (dup) {
		mgmt_net_send(fd, dup->resp, dup->resp_len, src, srclen);
		return;
	}
	if (tomb_find(m, msg->uuid, msg->token))
		return;
	if (msg->token == 0) {
		stats_inc(m->stats->mgmt_drops);
		return;
	}
	struct mgmt_msg resp = {.type = MGMT_CONNECT_RESP, .token = msg->token, .uuid = m->uuid,
				.proc = m->self};
	struct nic_route local;
	rpc_lock(rpc);
	rpc_local_route(rpc, &local);
	uint32_t max = rpc_max_pkt_data(rpc);
	rpc_unlock(rpc);
	resp.route = local;

	int session = -1, rc = 0;
	if (msg->route.kind != local.kind)
		rc = -EPROTONOSUPPORT;
	else if (msg->data_per_pkt < RPC_MIN_PKT_DATA)
		rc = -EINVAL;
	struct mpeer *peer = rc ? NULL : peer_get(m, msg->uuid, from, &msg->proc, now);
	if (!rc && !peer)
		rc = -ENOMEM;
	if (!rc) {
		uint32_t agreed = min32(min32(msg->data_per_pkt, max), path_data_max(m, &local, from));
		struct nic_route route = msg->route;
		rpc_lock(rpc);
		session = rpc_session_create(rpc, msg->token);
		if (session >= 0) {
			nic_route_fixup(rpc_nic(rpc), &route, (const struct sockaddr *)&from->ss,
					from->len);
			rpc_session_set_origin(rpc, session, (const struct sockaddr *)&from->ss,
					       from->len);
			rc = rpc_session_connect(rpc, session, &route, msg->session, agreed);
			if (rc < 0)
				rpc_session_reset(rpc, session, rc);
		} else {
			rc = session;
		}
		rpc_unlock(rpc);
		resp.session = (uint16_t)(session >= 0 ? session : 0);
		resp.data_per_pkt = agreed;
	}
	struct msess *s = NULL;
	if (!rc) {
		s = sess_add(m, rpc, session, msg->token, peer, false);
		if (!s) {
			rpc_lock(rpc);
			rpc_session_reset(rpc, session, -ENOMEM);
			rpc_unlock(rpc);
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
	mgmt_net_send(fd, buf, len, src, srclen);
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
	case MGMT_CONNECT_REQ: {
		struct rpc *ctl = __atomic_load_n(&m->ctl_rpc, __ATOMIC_ACQUIRE);
		if (l)
			on_connect_req(m, l->rpc, l->fd, &msg, src, srclen, &from, now);
		else if (ctl)
			on_connect_req(m, ctl, fd, &msg, src, srclen, &from, now);
		else
			stats_inc(m->stats->mgmt_drops);
		break;
	}
	case MGMT_CONNECT_RESP:
		on_connect_resp(m, &msg, &from, now);
		break;
	case MGMT_DISCONNECT: {
		/* Meant for another process sharing this rendezvous socket. */
		if (msg.to != m->uuid)
			break;
		struct msess *s = sess_find_token(m, msg.uuid, msg.token);
		if (!s)
			break;
		sess_take_in(s);
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
	case MGMT_OFFER: {
		/* Only a process that answers on the listener takes it up. */
		if (!l || !m->offer_fn) {
			stats_inc(m->stats->mgmt_drops);
			break;
		}
		struct mgmt_offer o = {.pid = msg.pid, .sid = msg.sid, .peer_sid = msg.peer_sid,
				       .token = msg.token};
		m->offer_fn(m->offer_ctx, (const struct sockaddr *)&l->bound.ss, l->bound.len, &o);
		break;
	}
	}
}

void mgmt_on_datagram(struct mgmt *m, int fd, struct listener *l, const uint8_t *buf, size_t len,
		      const struct sockaddr *src, socklen_t srclen, uint64_t now)
{
	on_datagram(m, fd, l, buf, len, src, srclen, now);
	/* After the answer (or the connect's waiter) has gone on (see struct
	 * mpeer): only a datagram makes a peer, first in the list. */
	struct mpeer *p = m->peers;
	if (p && p->watch_due) {
		p->watch_due = false;
		peer_watch(m, p, &p->proc);
	}
}

int mgmt_sess_peer_addr(struct mgmt *m, struct rpc *rpc, int session, struct mgmt_addr *out)
{
	for (struct msess *s = m->sessions; s; s = s->next) {
		if (s->rpc == rpc && s->session == session) {
			*out = s->peer->addr;
			return 0;
		}
	}
	return -ENOENT;
}

/* ---- timers ---- */

/* Resets every session shared with p (err: -EOWNERDEAD when its process is
 * known to be gone, -ETIMEDOUT when it was silent too long) and frees p. */
static void peer_dead(struct mgmt *m, struct mpeer *p, int err, uint64_t now)
{
	stats_inc(m->stats->dead_peers);
	/* sess_close frees p with its last session; stop before touching it. */
	unsigned left = p->nsessions;
	struct msess *s = m->sessions;
	while (left > 0 && s) {
		struct msess *next = s->next;
		if (s->peer == p) {
			left--;
			if (err == -EOWNERDEAD)
				sess_take_in(s);
			sess_close(m, s, err, false, now);
		}
		s = next;
	}
}

void mgmt_on_peer_exit(struct mgmt *m, int pidfd, uint64_t now)
{
	/* The poll that said so may be older than the sockets' messages just
	 * handled: a peer that said goodbye was freed and its pidfd's number
	 * may already name a new peer's. Only a pidfd readable now is a death. */
	struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
	if (sys()->poll(&pfd, 1, 0) != 1 || !(pfd.revents & POLLIN))
		return;
	for (struct mpeer *p = m->peers; p; p = p->next) {
		if (p->pidfd == pidfd) {
			log_info("mgmt: peer %016llx exited; ending its sessions",
				 (unsigned long long)p->uuid);
			peer_dead(m, p, -EOWNERDEAD, now);
			return;
		}
	}
}

size_t mgmt_peer_pidfds(struct mgmt *m, struct pollfd *pfd)
{
	size_t n = 0;
	for (struct mpeer *p = m->peers; p; p = p->next)
		if (p->pidfd >= 0)
			pfd[n++] = (struct pollfd){.fd = p->pidfd, .events = POLLIN};
	return n;
}

/* Whether p's datapath spoke lately: a peer whose packets keep coming
 * lives, though its management thread be too starved to answer a ping (a
 * loaded host); p's last word moves up to its last packet. True too when
 * an endpoint is busy and cannot be asked now (the next check asks). */
/* How long the peer has been silent at now: none if it was heard after now
 * was read (the datapath stamps its own clock, which may run ahead of ours
 * by the time we look; unsigned, that difference read as centuries of
 * silence and a live peer was declared dead). */
static uint64_t peer_silent_ns(const struct mpeer *p, uint64_t now)
{
	return p->last_heard_ns > now ? 0 : now - p->last_heard_ns;
}

static bool peer_heard_on_datapath(struct mgmt *m, struct mpeer *p, uint64_t now, uint64_t fail_ns)
{
	bool busy = false;
	for (struct msess *s = m->sessions; s; s = s->next) {
		if (s->peer != p)
			continue;
		if (!rpc_trylock(s->rpc)) {
			busy = true;
			continue;
		}
		uint64_t rx = rpc_session_token(s->rpc, s->session) == s->token
				      ? rpc_session_rx_ns(s->rpc, s->session)
				      : 0;
		rpc_unlock(s->rpc);
		if (rx > p->last_heard_ns)
			p->last_heard_ns = rx;
	}
	return busy || peer_silent_ns(p, now) < fail_ns;
}

/* Closes sessions the endpoint dropped by itself, drops old tombstones. */
static void sweep(struct mgmt *m, uint64_t now)
{
	struct msess *s = m->sessions;
	while (s) {
		struct msess *next = s->next;
		/* Only a try: a thread that runs the event loop back to back can
		 * hold the lock for long, and waiting here would delay answering
		 * pings. The next sweep looks again. */
		if (rpc_trylock(s->rpc)) {
			bool alive = rpc_session_is_up(s->rpc, s->session) &&
				     rpc_session_token(s->rpc, s->session) == s->token;
			rpc_unlock(s->rpc);
			if (!alive)
				sess_close(m, s, -ECONNRESET, true, now);
		}
		s = next;
	}
	if (now > TOMBSTONE_NS)
		tombs_expire(m, now - TOMBSTONE_NS);
}

int mgmt_timers(struct mgmt *m, uint64_t now)
{
	uint64_t next = now + 1000 * MGMT_MS;
	const uint64_t fail_ns = (uint64_t)m->cfg->failure_timeout_ms * MGMT_MS;
	const uint64_t beat_ns = (uint64_t)m->cfg->heartbeat_ms * MGMT_MS;

	struct pending *p = m->pendings;
	while (p) {
		struct pending *pnext = p->next;
		for (struct waiter **wp = &p->waiters; *wp;) {
			struct waiter *w = *wp;
			if (now >= w->deadline_ns) {
				*wp = w->next;
				mgmt_waiter_done(m, w, -ETIMEDOUT);
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
		if (peer->gone) {
			peer_dead(m, peer, -EOWNERDEAD, now);
		} else if (peer->pidfd >= 0) {
			/* Its death polls; its silence is a stall. One ping shows
			 * it our control socket (handover dials it there). */
			if (!peer->pinged && now >= peer->next_ping_ns) {
				send_ctl(m, MGMT_PING, 0, &peer->addr);
				peer->pinged = true;
			}
			if (!peer->pinged && peer->next_ping_ns < next)
				next = peer->next_ping_ns;
		} else if (peer_silent_ns(peer, now) >= fail_ns &&
		    !peer_heard_on_datapath(m, peer, now, fail_ns)) {
			log_warn("mgmt: peer %016llx silent for %u ms, declared dead; resetting its "
				 "sessions",
				 (unsigned long long)peer->uuid, m->cfg->failure_timeout_ms);
			peer_dead(m, peer, -ETIMEDOUT, now);
		} else {
			if (now >= peer->next_ping_ns) {
				send_ctl(m, MGMT_PING, 0, &peer->addr);
				peer->next_ping_ns = now + beat_ns;
			}
			if (peer->next_ping_ns < next)
				next = peer->next_ping_ns;
			uint64_t due = peer->last_heard_ns + fail_ns;
			if (due <= now)
				due = now + MGMT_MS; /* an endpoint was busy: ask it again soon */
			if (due < next)
				next = due;
		}
		peer = pnext;
	}

	if (m->sessions || m->tombs_oldest) {
		if (now >= m->next_sweep_ns) {
			sweep(m, now);
			m->next_sweep_ns = now + beat_ns;
		}
		if (m->next_sweep_ns < next)
			next = m->next_sweep_ns;
	}
	return (int)((next - now + MGMT_MS - 1) / MGMT_MS);
}


/* ---- commands' session work ---- */

void mgmt_sess_disconnect(struct mgmt *m, struct rpc *rpc, int session, uint64_t now)
{
	for (struct msess *s = m->sessions; s; s = s->next) {
		if (s->rpc == rpc && s->session == session) {
			sess_close(m, s, -ENOTCONN, true, now);
			return;
		}
	}
}

void mgmt_sess_forget(struct mgmt *m, struct rpc *rpc, uint64_t now)
{
	struct pending *p = m->pendings;
	while (p) {
		struct pending *next = p->next;
		if (p->rpc == rpc)
			pending_finish(m, p, -ECANCELED);
		p = next;
	}
	struct msess *s = m->sessions;
	while (s) {
		struct msess *next = s->next;
		if (s->rpc == rpc)
			sess_close(m, s, -ENOTCONN, true, now);
		s = next;
	}
}

void mgmt_sess_shutdown(struct mgmt *m)
{
	while (m->pendings)
		pending_finish(m, m->pendings, -ECANCELED);
	while (m->sessions) {
		struct msess *s = m->sessions;
		m->sessions = s->next;
		send_disconnect(m, s->token, s->peer->uuid, &s->peer->addr);
		stats_inc(m->stats->sessions_closed);
		free(s);
	}
	tombs_expire(m, UINT64_MAX);
	while (m->peers)
		peer_free(m, m->peers);
}
