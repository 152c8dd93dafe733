/* An RPC endpoint: creation, buffers, and the event loop's receive side. */
#include "autoconfig.h"

#include "transport/rpc.h"

#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/clock.h"
#include "transport/cpu_relax.h"
#include "transport/log.h"
#include "transport/rpc_internal.h"

/* Carousel's slot width and horizon: 1 us slots over 8 ms. */
#define WHEEL_SLOT_NS 1000u
#define WHEEL_SLOTS 8192u
#define WHEEL_CAPACITY 8192u
#define MSGBUF_STRUCT_SPACE 64u
_Static_assert(sizeof(struct msgbuf) <= MSGBUF_STRUCT_SPACE, "msgbuf fits before its data");

struct rpc *rpc_create(struct nic *nic, const struct ferry_config *cfg, struct ferry_stats *st,
		       int *err, char *msg, size_t msglen)
{
	struct rpc *rpc = calloc(1, sizeof(*rpc));
	if (!rpc) {
		*err = -ENOMEM;
		nic_close(nic);
		return NULL;
	}
	pthread_mutex_init(&rpc->lock, NULL);
	rpc->nic = nic;
	rpc->cfg = cfg;
	rpc->st = st;
	rpc->max_dpp = nic->max_pkt_size - PKTHDR_SIZE;
	rpc->cc = cfg->congestion_control == FERRY_CC_ON ||
		  (cfg->congestion_control == FERRY_CC_AUTO && nic->switched_fabric);
	if (nic->max_pkt_size < PKTHDR_SIZE + RPC_MIN_PKT_DATA) {
		snprintf(msg, msglen, "the %s nic's packets (%u bytes) are smaller than ferry's minimum (%u)",
			 nic->name, nic->max_pkt_size, PKTHDR_SIZE + RPC_MIN_PKT_DATA);
		*err = -EINVAL;
		goto fail;
	}
	fault_init(&rpc->fault, &cfg->fault);
	rpc->now_ns = clock_now_ns();
	rpc->pool = pool_create(nic, err, msg, msglen);
	if (!rpc->pool)
		goto fail;
	rpc->ctrl_chunk = pool_alloc(rpc->pool, RPC_CTRL_HDRS * PKTHDR_SIZE);
	rpc->held_pkt = rpc->fault.enabled ? malloc(nic->max_pkt_size) : NULL;
	rpc->wheel = wheel_create(WHEEL_SLOT_NS, WHEEL_SLOTS, WHEEL_CAPACITY, rpc->now_ns);
	if (!rpc->ctrl_chunk || !rpc->wheel || (rpc->fault.enabled && !rpc->held_pkt)) {
		snprintf(msg, msglen, "out of memory creating an endpoint");
		*err = -ENOMEM;
		goto fail;
	}
	*err = 0;
	return rpc;
fail:
	if (rpc->wheel)
		wheel_destroy(rpc->wheel);
	free(rpc->held_pkt);
	pool_destroy(rpc->pool);
	nic_close(nic);
	pthread_mutex_destroy(&rpc->lock);
	free(rpc);
	return NULL;
}

void rpc_destroy(struct rpc *rpc)
{
	if (!rpc)
		return;
	rpc_lock(rpc);
	for (uint32_t i = 0; i < rpc->n_sessions; i++)
		rpc_session_reset(rpc, (int)i, -ECONNRESET);
	if (rpc->n_tx)
		tx_flush(rpc);
	nic_flush(rpc->nic);
	/* Request handles still held by handlers die here with their sessions. */
	session_free_zombies(rpc);
	session_spares_free(rpc);
	rpc_unlock(rpc);
	free(rpc->sessions);
	wheel_destroy(rpc->wheel);
	free(rpc->held_pkt);
	pool_destroy(rpc->pool);
	nic_close(rpc->nic);
	pthread_mutex_destroy(&rpc->lock);
	free(rpc);
}

/* A wait for the endpoint lock spins this many turns before it sleeps. */
#define RPC_LOCK_SPINS 128

/*
 * Threads of one process share the endpoint, and each socket call takes
 * its lock for a few hundred nanoseconds. A waiter that went straight to
 * the futex paid two system calls for a lock freed a moment later:
 * memcached's two workers under memcaslap made 0.5 futex calls per
 * request, with almost no context switches (the holder was running). The
 * spin is bounded (a few microseconds) for a holder that is off the CPU.
 */
void rpc_lock(struct rpc *rpc)
{
	for (int i = 0; i < RPC_LOCK_SPINS; i++) {
		if (pthread_mutex_trylock(&rpc->lock) == 0)
			return;
		cpu_relax();
	}
	pthread_mutex_lock(&rpc->lock);
}
bool rpc_trylock(struct rpc *rpc) { return pthread_mutex_trylock(&rpc->lock) == 0; }
void rpc_unlock(struct rpc *rpc) { pthread_mutex_unlock(&rpc->lock); }

int rpc_register_handler(struct rpc *rpc, uint8_t req_type, rpc_handler_fn fn, void *ctx)
{
	if (rpc->handlers[req_type].fn)
		return -EEXIST;
	rpc->handlers[req_type].fn = fn;
	rpc->handlers[req_type].ctx = ctx;
	return 0;
}

int rpc_register_placer(struct rpc *rpc, uint8_t req_type, rpc_place_fn fn, uint32_t head_len)
{
	if (!rpc->handlers[req_type].fn || head_len > RPC_PLACE_HEAD_MAX)
		return -EINVAL;
	rpc->handlers[req_type].place = fn;
	rpc->handlers[req_type].head_len = head_len;
	return 0;
}

void rpc_set_session_handler(struct rpc *rpc, rpc_session_fn fn, void *ctx)
{
	rpc->session_fn = fn;
	rpc->session_ctx = ctx;
}

struct msgbuf *rpc_alloc_msg(struct rpc *rpc, uint32_t size)
{
	if (size > RPC_MAX_MSG_SIZE)
		return NULL;
	struct pool_chunk *c = pool_alloc(rpc->pool, MSGBUF_STRUCT_SPACE + msgbuf_alloc_size(size));
	if (!c)
		return NULL;
	struct msgbuf *m = (struct msgbuf *)(void *)c->addr;
	msgbuf_init(m, c->addr + MSGBUF_STRUCT_SPACE, size, c->lkey, c);
	return m;
}

void rpc_free_msg(struct rpc *rpc, struct msgbuf *m)
{
	if (m)
		pool_free(rpc->pool, m->chunk);
}

struct msgbuf *rpc_view_msg(struct msgbuf *view, const uint8_t *data, uint32_t size)
{
	memset(view, 0, sizeof(*view));
	view->buf = (uint8_t *)data;
	view->data_size = view->max_data_size = size;
	view->max_pkts = 1;
	return view;
}

static void count_decode_error(struct ferry_stats *st, enum pkt_error e)
{
	switch (e) {
	case PKT_ERR_SHORT: stats_drop(st, short); break;
	case PKT_ERR_MAGIC: stats_drop(st, magic); break;
	case PKT_ERR_TYPE: stats_drop(st, type); break;
	case PKT_ERR_SIZE: stats_drop(st, size); break;
	case PKT_OK: break;
	}
}

/* Everything about a packet is checked before any of it is believed. */
static void handle_packet(struct rpc *rpc, const uint8_t *pkt, uint32_t len)
{
	if (len < PKTHDR_SIZE) {
		stats_drop(rpc->st, short);
		return;
	}
	if (pkt[0] != PKTHDR_MAGIC) {
		stats_drop(rpc->st, magic);
		return;
	}
	uint16_t dest;
	memcpy(&dest, pkt + offsetof(struct pkthdr, dest_session), sizeof(dest));
	struct session *s = session_get(rpc, le16toh(dest));
	if (!s || s->state != SESSION_UP) {
		stats_drop(rpc->st, session);
		return;
	}
	struct pkt_info pi;
	enum pkt_error e = pkthdr_decode(pkt, len, s->dpp, &pi);
	if (e != PKT_OK) {
		count_decode_error(rpc->st, e);
		return;
	}
	if (pi.token != s->token) {
		stats_drop(rpc->st, token);
		return;
	}
	s->rx_ns = rpc->now_ns;
	stats_add(&rpc->st->bytes_rx, len - PKTHDR_SIZE);
	session_hold(s);
	switch (pi.type) {
	case PKT_REQ: server_on_request(rpc, s, &pi, pkt + PKTHDR_SIZE); break;
	case PKT_RFR: server_on_rfr(rpc, s, &pi); break;
	case PKT_RESP:
	case PKT_CR: client_on_answer(rpc, s, &pi, pkt + PKTHDR_SIZE); break;
	}
	session_put(rpc, s);
}

static void release_held(struct rpc *rpc)
{
	if (rpc->has_held) {
		rpc->has_held = false;
		handle_packet(rpc, rpc->held_pkt, rpc->held_len);
	}
}

static void receive_with_faults(struct rpc *rpc, const struct nic_rx *rx)
{
	switch (fault_next(&rpc->fault)) {
	case FAULT_DROP:
		stats_drop(rpc->st, fault);
		return;
	case FAULT_DUP:
		handle_packet(rpc, rx->pkt, rx->len);
		handle_packet(rpc, rx->pkt, rx->len);
		break;
	case FAULT_REORDER:
		if (!rpc->has_held && rx->len <= rpc->nic->max_pkt_size) {
			memcpy(rpc->held_pkt, rx->pkt, rx->len);
			rpc->held_len = rx->len;
			rpc->has_held = true;
			return;
		}
		handle_packet(rpc, rx->pkt, rx->len);
		break;
	case FAULT_PASS:
		handle_packet(rpc, rx->pkt, rx->len);
		break;
	}
	release_held(rpc);
}

unsigned rpc_run_once(struct rpc *rpc)
{
	struct nic_rx rx[RPC_RX_BATCH];
	void *bufs[RPC_RX_BATCH];
	unsigned n = nic_rx_burst(rpc->nic, rx, RPC_RX_BATCH);
	/* Reading the clock costs more than an empty poll of a user-space
	 * ring; timers are coarse (a quarter of the timeout), so an idle loop
	 * reads it every 16th pass. Paced packets need it every pass. */
	if (n || wheel_count(rpc->wheel) || ++rpc->idle_passes >= 16)
		rpc_clock_update(rpc);
	if (n) {
		stats_add(&rpc->st->pkts_rx, n);
		unsigned nbufs = 0;
		/* A pass run from inside a handler leaves the outer packet's
		 * keeping alone and keeps nothing itself. */
		bool may_keep = !rpc->rx_buf;
		for (unsigned i = 0; i < n; i++) {
			if (rpc->fault.enabled) {
				receive_with_faults(rpc, &rx[i]);
			} else if (!may_keep) {
				handle_packet(rpc, rx[i].pkt, rx[i].len);
			} else {
				rpc->rx_buf = rx[i].buf;
				rpc->rx_pkt = rx[i].pkt;
				rpc->rx_len = rx[i].len;
				rpc->rx_buf_kept = false;
				handle_packet(rpc, rx[i].pkt, rx[i].len);
				rpc->rx_buf = NULL;
				if (rpc->rx_buf_kept)
					continue;
			}
			bufs[nbufs++] = rx[i].buf;
		}
		if (nbufs)
			nic_post_recvs(rpc->nic, bufs, nbufs);
	} else {
		release_held(rpc);
	}
	if (rpc->n_cr_due)
		server_flush_crs(rpc);
	if (wheel_count(rpc->wheel))
		tx_reap_wheel(rpc);
	if (rpc->active && rpc->now_ns >= rpc->next_timer_ns) {
		client_check_timeouts(rpc);
		uint64_t tick = (uint64_t)rpc->cfg->rto_us * 250u; /* a quarter of the timeout */
		rpc->next_timer_ns = rpc->now_ns + tick;
	}
	if (rpc->n_tx)
		tx_flush(rpc);
	return n;
}

void rpc_flush(struct rpc *rpc)
{
	rpc->now_ns = clock_now_ns();
	if (wheel_count(rpc->wheel))
		tx_reap_wheel(rpc);
	if (rpc->n_tx)
		tx_flush(rpc);
}

void rpc_run_for_us(struct rpc *rpc, uint64_t us)
{
	uint64_t end = clock_now_ns() + us * 1000u;
	do
		rpc_run_once(rpc);
	while (rpc->now_ns < end);
}

void *rpc_keep_rx(struct rpc *rpc, const void *data, size_t len)
{
	const uint8_t *p = data;
	if (!rpc->rx_buf || rpc->rx_buf_kept || rpc->rx_kept >= rpc->nic->rx_keep_max ||
	    p < rpc->rx_pkt || len > rpc->rx_len || p - rpc->rx_pkt > (ptrdiff_t)(rpc->rx_len - len))
		return NULL;
	rpc->rx_buf_kept = true;
	rpc->rx_kept++;
	stats_add(&rpc->st->bytes_rx_kept, len);
	return rpc->rx_buf;
}

void rpc_release_rx(struct rpc *rpc, void *buf)
{
	rpc->rx_kept--;
	nic_post_recvs(rpc->nic, &buf, 1);
}

unsigned rpc_rx_kept(const struct rpc *rpc) { return rpc->rx_kept; }
unsigned rpc_rx_keep_max(const struct rpc *rpc) { return rpc->nic->rx_keep_max; }

bool rpc_busy(const struct rpc *rpc) { return rpc->active != NULL || rpc->has_held; }

void rpc_fault_drop_next(struct rpc *rpc, unsigned n)
{
	fault_drop_next(&rpc->fault, n);
}

bool rpc_busy_with_live_peers(const struct rpc *rpc)
{
	if (rpc->has_held)
		return true;
	for (const struct session *s = rpc->active; s; s = s->active_next)
		if (!nic_peer_gone(rpc->nic, s->peer))
			return true;
	return false;
}

uint64_t rpc_pass_clock(const struct rpc *rpc) { return rpc->now_ns; }

void rpc_clock_update(struct rpc *rpc)
{
	rpc->now_ns = clock_now_ns();
	rpc->idle_passes = 0;
}

int rpc_notify_fd(const struct rpc *rpc) { return nic_notify_fd(rpc->nic); }
int rpc_arm_notify(struct rpc *rpc) { return nic_arm_notify(rpc->nic); }
bool rpc_rx_syscall(const struct rpc *rpc) { return rpc->nic->rx_syscall; }
bool rpc_rx_drained(const struct rpc *rpc) { return nic_rx_drained(rpc->nic); }
void rpc_rx_notified(struct rpc *rpc) { nic_rx_notified(rpc->nic); }

void rpc_local_route(const struct rpc *rpc, struct nic_route *out) { nic_local_route(rpc->nic, out); }
struct nic *rpc_nic(const struct rpc *rpc) { return rpc->nic; }
uint32_t rpc_max_pkt_data(const struct rpc *rpc) { return rpc->max_dpp; }

void rpc_dump(struct rpc *rpc, FILE *out)
{
	for (uint32_t i = 0; i < rpc->n_sessions; i++) {
		struct session *s = rpc->sessions[i];
		if (!s)
			continue;
		fprintf(out, "session %u peer %u state %d credits %u/%u busy %u backlog %u wheel %u\n",
			s->num, s->peer_num, (int)s->state, s->credits, s->credits_max, s->busy_slots,
			s->backlog_len, wheel_count(rpc->wheel));
		for (uint32_t k = 0; k < s->n_client_slots; k++) {
			struct client_slot *cs = &s->cslots[k];
			if (cs->busy)
				fprintf(out, "  client slot %u req %llu tx %u rx %u N %u M %u epoch %u rolled %d\n",
					k, (unsigned long long)cs->req_num, cs->num_tx, cs->num_rx,
					cs->req_pkts, cs->resp_pkts, cs->epoch, cs->rolled_back);
		}
		for (uint32_t k = 0; k < RPC_SERVER_SLOTS; k++) {
			struct server_slot *ss = &s->sslots[k];
			if (ss->state != SRV_EMPTY && ss->state != SRV_RESPONDED)
				fprintf(out, "  server slot %u req %llu state %d rx %u/%u\n", k,
					(unsigned long long)ss->req_num, (int)ss->state, ss->rx_pkts,
					ss->req_pkts);
		}
	}
}
