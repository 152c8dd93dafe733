/* Sessions of an endpoint: creation, peer installation, reset and teardown. */
#include "autoconfig.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "transport/clock.h"
#include "transport/log.h"
#include "transport/rpc_internal.h"

struct session *session_get(struct rpc *rpc, int num)
{
	if (num < 0 || (uint32_t)num >= rpc->n_sessions)
		return NULL;
	return rpc->sessions[num];
}

void session_activate(struct rpc *rpc, struct session *s)
{
	if (s->on_active)
		return;
	s->on_active = true;
	s->active_prev = NULL;
	s->active_next = rpc->active;
	if (rpc->active)
		rpc->active->active_prev = s;
	rpc->active = s;
}

void session_deactivate(struct rpc *rpc, struct session *s)
{
	if (!s->on_active)
		return;
	if (s->active_prev)
		s->active_prev->active_next = s->active_next;
	else
		rpc->active = s->active_next;
	if (s->active_next)
		s->active_next->active_prev = s->active_prev;
	s->active_next = s->active_prev = NULL;
	s->on_active = false;
}

void session_release_server_slot(struct rpc *rpc, struct server_slot *ss)
{
	/* The response's memory is about to be reused or freed. The requester
	 * moved on, so it received every packet once; only packets still in
	 * our batch, or a duplicate the nic may still hold, read it now. */
	if (ss->resp && rpc->n_tx && ss->tx_batch == rpc->tx_batch)
		tx_flush(rpc);
	if (ss->resp_retransmitted) {
		nic_flush(rpc->nic);
		ss->resp_retransmitted = false;
	}
	if (ss->resp && ss->resp != ss->pre_resp)
		rpc_free_msg(rpc, ss->resp);
	ss->resp = NULL;
	if (ss->req) {
		rpc_free_msg(rpc, ss->req);
		ss->req = NULL;
	}
}

static size_t tx_times_len(const struct session *s)
{
	return (size_t)s->n_client_slots * s->credits_max * sizeof(uint64_t);
}

/*
 * One mapping for every slot's send times, credits_max entries a slot,
 * made once the session's credits are known (at connect; nothing is sent
 * before): a slot's ring is faulted in only once the slot sends, so a
 * process that makes a session for one connection (a fork child) takes a
 * page, not one per slot (calloc from a thread's arena clears the whole
 * block).
 */
static int map_tx_times(struct rpc *rpc, struct session *s)
{
	size_t len = tx_times_len(s);
	uint64_t *tx_ns = MAP_FAILED;
	/* A spare's entries are older sessions' times: each is written at a
	 * send before its answer reads it, as in a fresh mapping. */
	for (unsigned i = rpc->n_tx_times_spare; i-- > 0;) {
		if (rpc->tx_times_spare[i].len != len)
			continue;
		tx_ns = rpc->tx_times_spare[i].map;
		rpc->tx_times_spare[i] = rpc->tx_times_spare[--rpc->n_tx_times_spare];
		break;
	}
	if (tx_ns == MAP_FAILED)
		tx_ns = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tx_ns == MAP_FAILED)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->n_client_slots; i++)
		s->cslots[i].tx_ns = tx_ns + (size_t)i * s->credits_max;
	return 0;
}

static void session_free(struct rpc *rpc, struct session *s)
{
	for (uint32_t i = 0; i < RPC_SERVER_SLOTS; i++) {
		struct server_slot *ss = &s->sslots[i];
		session_release_server_slot(rpc, ss);
		if (ss->pre_resp)
			rpc_free_msg(rpc, ss->pre_resp);
	}
	if (s->peer)
		nic_peer_destroy(rpc->nic, s->peer);
	if (s->cslots && s->cslots[0].tx_ns) { /* every slot's ring */
		if (rpc->n_tx_times_spare < RPC_TX_TIMES_SPARE) {
			rpc->tx_times_spare[rpc->n_tx_times_spare].map = s->cslots[0].tx_ns;
			rpc->tx_times_spare[rpc->n_tx_times_spare++].len = tx_times_len(s);
		} else {
			munmap(s->cslots[0].tx_ns, tx_times_len(s));
		}
	}
	free(s->cslots);
	free(s->backlog);
	free(s);
}

void session_put(struct rpc *rpc, struct session *s)
{
	if (--s->refs || s->state != SESSION_DEAD)
		return;
	if (s->zombie) {
		struct session **z = &rpc->zombies;
		while (*z != s)
			z = &(*z)->zombie_next;
		*z = s->zombie_next;
	}
	session_free(rpc, s);
}

void session_spares_free(struct rpc *rpc)
{
	while (rpc->n_tx_times_spare) {
		rpc->n_tx_times_spare--;
		munmap(rpc->tx_times_spare[rpc->n_tx_times_spare].map,
		       rpc->tx_times_spare[rpc->n_tx_times_spare].len);
	}
}

void session_free_zombies(struct rpc *rpc)
{
	while (rpc->zombies) {
		struct session *s = rpc->zombies;
		rpc->zombies = s->zombie_next;
		session_free(rpc, s);
	}
}

int rpc_session_create(struct rpc *rpc, uint64_t token)
{
	uint32_t num = 0;
	while (num < rpc->n_sessions && rpc->sessions[num])
		num++;
	if (num == rpc->n_sessions) {
		if (rpc->n_sessions >= UINT16_MAX)
			return -ENOSPC;
		uint32_t cap = rpc->n_sessions ? rpc->n_sessions * 2 : 16;
		if (cap > UINT16_MAX)
			cap = UINT16_MAX;
		struct session **t = realloc(rpc->sessions, cap * sizeof(*t));
		if (!t)
			return -ENOMEM;
		memset(t + rpc->n_sessions, 0, (cap - rpc->n_sessions) * sizeof(*t));
		rpc->sessions = t;
		rpc->n_sessions = cap;
	}
	struct session *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->num = (uint16_t)num;
	s->token = token;
	s->state = SESSION_CONNECTING;
	s->credits_max = ferry_session_credits(rpc->cfg, rpc->nic->max_pkt_size);
	s->n_client_slots = rpc->cfg->session_slots;
	s->cslots = calloc(s->n_client_slots, sizeof(*s->cslots));
	if (!s->cslots) {
		free(s);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < s->n_client_slots; i++)
		s->cslots[i].req_num = i;
	timely_init(&s->timely, rpc->cfg->link_gbps, clock_now_ns());
	rpc->sessions[num] = s;
	return (int)num;
}

int rpc_session_connect(struct rpc *rpc, int num, const struct nic_route *route,
			uint16_t peer_session, uint32_t dpp)
{
	struct session *s = session_get(rpc, num);
	if (!s || s->state != SESSION_CONNECTING)
		return -EINVAL;
	if (dpp < RPC_MIN_PKT_DATA || dpp > rpc->max_dpp)
		return -EINVAL;
	/* Credits count packets of the size the peers agreed on: on udp the
	 * nic's packets are 64 KB, a path's may be 1,500 bytes, and credits
	 * for the former would hold a session to a fraction of
	 * FERRY_CREDIT_BYTES in flight. A nic whose receive queue was sized
	 * for its credits caps them. */
	uint32_t credits = ferry_session_credits(rpc->cfg, dpp + PKTHDR_SIZE);
	if (rpc->nic->max_session_credits && credits > rpc->nic->max_session_credits)
		credits = rpc->nic->max_session_credits;
	s->credits_max = credits;
	if (map_tx_times(rpc, s) != 0)
		return -ENOMEM;
	int rc = nic_peer_create(rpc->nic, route, &s->peer);
	if (rc)
		return rc;
	s->peer_num = peer_session;
	s->dpp = dpp;
	s->credits = s->credits_max;
	s->state = SESSION_UP;
	if (rpc->session_fn)
		rpc->session_fn(rpc, num, RPC_SESSION_UP, 0, rpc->session_ctx);
	return 0;
}

void rpc_session_reset(struct rpc *rpc, int num, int err)
{
	struct session *s = session_get(rpc, num);
	if (!s)
		return;
	bool was_up = s->state == SESSION_UP;
	s->state = SESSION_DEAD;
	rpc->sessions[num] = NULL;
	session_hold(s);
	session_deactivate(rpc, s);
	client_fail_all(rpc, s, err);
	for (uint32_t i = 0; i < RPC_SERVER_SLOTS; i++)
		if (s->sslots[i].state != SRV_IN_HANDLER)
			session_release_server_slot(rpc, &s->sslots[i]);
	if (was_up && rpc->session_fn)
		rpc->session_fn(rpc, num, err == -ENOTCONN ? RPC_SESSION_CLOSED : RPC_SESSION_RESET,
				err, rpc->session_ctx);
	if (s->refs > 1) {
		/* A handler still holds one of its requests: kept until it
		 * responds, or until rpc_destroy. */
		s->zombie = true;
		s->zombie_next = rpc->zombies;
		rpc->zombies = s;
	}
	session_put(rpc, s);
}

bool rpc_session_peer_gone(const struct rpc *rpc, int num)
{
	struct session *s = session_get((struct rpc *)rpc, num);
	return s && nic_peer_gone(rpc->nic, s->peer);
}

bool rpc_session_is_up(const struct rpc *rpc, int num)
{
	struct session *s = session_get((struct rpc *)rpc, num);
	return s && s->state == SESSION_UP;
}

uint32_t rpc_session_pkt_data(const struct rpc *rpc, int num)
{
	struct session *s = session_get((struct rpc *)rpc, num);
	return s && s->dpp ? s->dpp : rpc->max_dpp;
}

uint64_t rpc_session_token(const struct rpc *rpc, int num)
{
	struct session *s = session_get((struct rpc *)rpc, num);
	return s ? s->token : 0;
}

void rpc_session_set_origin(struct rpc *rpc, int num, const struct sockaddr *sa, socklen_t len)
{
	struct session *s = session_get(rpc, num);
	if (!s || len > sizeof(s->origin))
		return;
	memcpy(&s->origin, sa, len);
	s->origin_len = len;
}

socklen_t rpc_session_origin(const struct rpc *rpc, int num, struct sockaddr_storage *out)
{
	struct session *s = session_get((struct rpc *)rpc, num);
	if (!s || !s->origin_len)
		return 0;
	memcpy(out, &s->origin, s->origin_len);
	return s->origin_len;
}

bool rpc_session_next(const struct rpc *rpc, uint32_t *cursor, struct rpc_session_info *out)
{
	for (uint32_t i = *cursor; i < rpc->n_sessions; i++) {
		const struct session *s = rpc->sessions[i];
		if (!s)
			continue;
		*out = (struct rpc_session_info){
			.num = s->num,
			.peer_num = s->peer_num,
			.up = s->state == SESSION_UP,
			.rtt_ns = s->rtt_ns,
			.rate_bps = (uint64_t)timely_rate(&s->timely),
			.credits_used = s->credits_max - s->credits,
			.credits_max = s->credits_max,
			.busy_slots = s->busy_slots,
			.backlog = s->backlog_len,
			.retransmits = s->retransmits,
			.drops = s->drops,
			.origin_len = s->origin_len,
		};
		memcpy(&out->origin, &s->origin, s->origin_len);
		*cursor = i + 1;
		return true;
	}
	*cursor = rpc->n_sessions;
	return false;
}

uint64_t rpc_session_rx_ns(const struct rpc *rpc, int num)
{
	struct session *s = session_get((struct rpc *)rpc, num);
	return s && s->state == SESSION_UP ? s->rx_ns : 0;
}
