/*
 * softib UD queue pairs: the RESET/INIT/RTR/RTS state machine with the
 * attribute rules of the IB spec (11.2.4.2, UD column), sends, receives and
 * the receive "DMA" that places a GRH in front of each packet.
 */
#include "autoconfig.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compat/softib/softib_int.h"
#include "transport/copy.h"

static bool sib_state_receives(enum ibv_qp_state s)
{
	return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE;
}

struct ibv_qp *sib_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct sib_context *c = sib_ctx(pd->context);
	struct ibv_qp_cap *cap = &attr->cap;
	if (attr->qp_type != IBV_QPT_UD) {
		errno = EOPNOTSUPP; /* softib does UD only */
		return NULL;
	}
	if (!attr->send_cq || !attr->recv_cq || attr->srq || attr->send_cq->context != pd->context ||
	    attr->recv_cq->context != pd->context || cap->max_send_wr < 1 ||
	    cap->max_send_wr > SIB_MAX_QP_WR || cap->max_recv_wr < 1 ||
	    cap->max_recv_wr > SIB_MAX_QP_WR || cap->max_send_sge > SIB_MAX_SGE ||
	    cap->max_recv_sge > SIB_MAX_SGE || cap->max_inline_data > SIB_MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	struct sib_qp *qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->rq_cap = cap->max_recv_wr;
	qp->rq = calloc(qp->rq_cap, sizeof(*qp->rq));
	if (!qp->rq) {
		free(qp);
		errno = ENOMEM;
		return NULL;
	}
	uint32_t nslots = 1;
	while (nslots < cap->max_recv_wr)
		nslots <<= 1;
	int rc = sib_fabric_qp_create(c, qp, nslots);
	if (rc) {
		free(qp->rq);
		free(qp);
		errno = rc;
		return NULL;
	}
	if (cap->max_send_sge == 0)
		cap->max_send_sge = 1;
	if (cap->max_recv_sge == 0)
		cap->max_recv_sge = 1;
	qp->cap = *cap;
	qp->state = IBV_QPS_RESET;
	qp->port = 1;
	qp->qp.context = pd->context;
	qp->qp.qp_context = attr->qp_context;
	qp->qp.pd = pd;
	qp->qp.send_cq = attr->send_cq;
	qp->qp.recv_cq = attr->recv_cq;
	qp->qp.qp_type = IBV_QPT_UD;
	qp->qp.state = IBV_QPS_RESET;
	pthread_mutex_init(&qp->qp.mutex, NULL);
	pthread_cond_init(&qp->qp.cond, NULL);
	struct sib_cq *rcq = (struct sib_cq *)attr->recv_cq;
	if (rcq->cq.channel) {
		struct sib_channel *ch = (struct sib_channel *)rcq->cq.channel;
		snprintf(qp->shm->wake_path, sizeof(qp->shm->wake_path), "%s", ch->path);
		qp->shm->wake_cookie = (uintptr_t)rcq;
	}
	sib_cq_attach_rqp(rcq, qp);
	sib_pd_ref(pd, 1);
	return &qp->qp;
}

int sib_destroy_qp(struct ibv_qp *ibqp)
{
	struct sib_qp *qp = (struct sib_qp *)ibqp;
	struct sib_context *c = sib_ctx(ibqp->context);
	sib_cq_detach_rqp((struct sib_cq *)ibqp->recv_cq, qp);
	/* Local completions still naming this QP must not touch it later. */
	struct sib_cq *scq = (struct sib_cq *)ibqp->send_cq;
	for (uint32_t i = scq->head; i != scq->tail; i++)
		if (scq->ring[i % scq->cap].qp == qp)
			scq->ring[i % scq->cap].qp = NULL;
	sib_fabric_qp_destroy(c, qp);
	sib_pd_ref(ibqp->pd, -1);
	pthread_mutex_destroy(&ibqp->mutex);
	pthread_cond_destroy(&ibqp->cond);
	free(qp->rq);
	free(qp);
	return 0;
}

/* Required and optional attributes per transition, UD QPs. */
static bool sib_transition(enum ibv_qp_state cur, enum ibv_qp_state next, int *req, int *opt)
{
	*req = IBV_QP_STATE;
	*opt = 0;
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
		return true;
	switch (cur) {
	case IBV_QPS_RESET:
		if (next != IBV_QPS_INIT)
			return false;
		*req |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
		return true;
	case IBV_QPS_INIT:
		if (next == IBV_QPS_INIT)
			*opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
		else if (next == IBV_QPS_RTR)
			*opt = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
		else
			return false;
		return true;
	case IBV_QPS_RTR:
		if (next != IBV_QPS_RTS)
			return false;
		*req |= IBV_QP_SQ_PSN;
		*opt = IBV_QP_CUR_STATE | IBV_QP_QKEY;
		return true;
	case IBV_QPS_RTS:
	case IBV_QPS_SQE:
		if (next != IBV_QPS_RTS)
			return false;
		*opt = IBV_QP_CUR_STATE | IBV_QP_QKEY;
		return true;
	default:
		return false;
	}
}

/* Completes every posted receive with a flush error (entering ERR). */
static void sib_flush_rq(struct sib_qp *qp)
{
	struct sib_cq *rcq = (struct sib_cq *)qp->qp.recv_cq;
	while (qp->rq_count) {
		struct sib_rwqe *w = &qp->rq[qp->rq_head];
		struct ibv_wc wc = {.wr_id = w->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
				    .opcode = IBV_WC_RECV, .qp_num = qp->qp.qp_num};
		if (sib_cq_push(rcq, &wc, NULL, 0))
			break;
		qp->rq_head = (qp->rq_head + 1) % qp->rq_cap;
		qp->rq_count--;
	}
	qp->rq_head = 0;
	qp->rq_count = 0;
}

int sib_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct sib_qp *qp = (struct sib_qp *)ibqp;
	enum ibv_qp_state cur = qp->state;
	if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur)
		return EINVAL;
	enum ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
	int req, opt;
	if (!sib_transition(cur, next, &req, &opt))
		return EINVAL;
	if ((mask & req) != req || (mask & ~(req | opt)))
		return EINVAL;
	if ((mask & IBV_QP_PORT) && attr->port_num != 1)
		return EINVAL;
	if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0)
		return EINVAL;
	if (mask & IBV_QP_PORT)
		qp->port = attr->port_num;
	if (mask & IBV_QP_PKEY_INDEX)
		qp->pkey_index = attr->pkey_index;
	if (mask & IBV_QP_SQ_PSN)
		qp->sq_psn = attr->sq_psn & 0xffffffu;
	if (mask & IBV_QP_QKEY)
		qp->qkey = attr->qkey;

	/* What senders see changes under the ring lock. */
	struct sib_qp_shm *q = qp->shm;
	sib_shm_lock(&q->lock);
	q->qkey = qp->qkey;
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) {
		/* Posted receives and queued packets are gone: nothing granted. */
		__atomic_store_n(&q->rx_ready, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&q->granted, q->tail, __ATOMIC_RELEASE);
		__atomic_store_n(&q->head, q->tail, __ATOMIC_RELEASE);
		q->snd_granted = q->snd_head = q->tail;
	} else {
		__atomic_store_n(&q->rx_ready, sib_state_receives(next), __ATOMIC_RELEASE);
	}
	sib_shm_unlock(&q->lock);

	if (next == IBV_QPS_ERR && cur != IBV_QPS_ERR)
		sib_flush_rq(qp);
	if (next == IBV_QPS_RESET) {
		qp->rq_head = qp->rq_count = 0;
		qp->sq_posted = qp->sq_retired = 0;
		qp->qkey = 0;
	}
	qp->state = next;
	ibqp->state = next;
	return 0;
}

int sib_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
		 struct ibv_qp_init_attr *init)
{
	struct sib_qp *qp = (struct sib_qp *)ibqp;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = qp->state;
	attr->cur_qp_state = qp->state;
	attr->qkey = qp->qkey;
	attr->port_num = qp->port;
	attr->pkey_index = qp->pkey_index;
	attr->sq_psn = qp->sq_psn;
	attr->cap = qp->cap;
	attr->path_mtu = IBV_MTU_4096;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = ibqp->qp_context;
		init->send_cq = ibqp->send_cq;
		init->recv_cq = ibqp->recv_cq;
		init->cap = qp->cap;
		init->qp_type = IBV_QPT_UD;
	}
	return 0;
}

/* Checks one local SGE against the MR its lkey names. */
static bool sib_sge_ok(struct sib_context *c, struct ibv_pd *pd, const struct ibv_sge *s,
		       bool write)
{
	if (s->length == 0)
		return true;
	struct sib_mr *m = sib_mr_find(c, s->lkey);
	if (!m || m->mr.pd != pd)
		return false;
	if (write && !(m->access & IBV_ACCESS_LOCAL_WRITE))
		return false;
	uintptr_t lo = (uintptr_t)m->mr.addr, hi = lo + m->mr.length;
	return s->addr >= lo && s->addr <= hi && s->length <= hi - s->addr;
}

static void sib_send_complete(struct sib_qp *qp, uint64_t wr_id, enum ibv_wc_status st)
{
	struct ibv_wc wc = {.wr_id = wr_id, .status = st, .opcode = IBV_WC_SEND,
			    .qp_num = qp->qp.qp_num};
	if (sib_cq_push((struct sib_cq *)qp->qp.send_cq, &wc, qp, qp->sq_posted))
		qp->state = qp->qp.state = IBV_QPS_ERR; /* CQ overrun */
}

int sib_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct sib_qp *qp = (struct sib_qp *)ibqp;
	struct sib_context *c = sib_ctx(ibqp->context);
	struct sib_wire wire = {0};
	for (; wr; wr = wr->next) {
		int rc = 0;
		uint32_t len = 0;
		if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQE &&
		    qp->state != IBV_QPS_ERR)
			rc = EINVAL;
		else if (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM)
			rc = EINVAL;
		else if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge)
			rc = EINVAL;
		else if (qp->sq_posted - qp->sq_retired >= qp->cap.max_send_wr)
			rc = ENOMEM;
		for (int i = 0; !rc && i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		if (!rc && (wr->send_flags & IBV_SEND_INLINE) && len > qp->cap.max_inline_data)
			rc = EINVAL;
		if (rc) {
			sib_wire_release(c, &wire);
			*bad = wr;
			return rc;
		}
		qp->sq_posted++;
		if (qp->state != IBV_QPS_RTS) {
			/* Errors and flushes complete whether signalled or not. */
			sib_send_complete(qp, wr->wr_id, IBV_WC_WR_FLUSH_ERR);
			continue;
		}
		enum ibv_wc_status st = IBV_WC_SUCCESS;
		struct sib_ah *ah = (struct sib_ah *)wr->wr.ud.ah;
		if (len > SIB_MAX_MSG)
			st = IBV_WC_LOC_LEN_ERR;
		else if (!ah || ah->ah.pd != ibqp->pd)
			st = IBV_WC_LOC_QP_OP_ERR;
		for (int i = 0; st == IBV_WC_SUCCESS && !(wr->send_flags & IBV_SEND_INLINE) &&
				i < wr->num_sge;
		     i++)
			if (!sib_sge_ok(c, ibqp->pd, &wr->sg_list[i], false))
				st = IBV_WC_LOC_PROT_ERR;
		if (st != IBV_WC_SUCCESS) {
			sib_send_complete(qp, wr->wr_id, st);
			qp->state = qp->qp.state = IBV_QPS_SQE;
			continue;
		}
		/* A QKey with the high bit set means "use the QP's own". */
		uint32_t qkey = (wr->wr.ud.remote_qkey & 0x80000000u) ? qp->qkey
								      : wr->wr.ud.remote_qkey;
		const uint8_t *sgid = c->fab.shm->gid[ah->attr.grh.sgid_index];
		sib_wire_put(c, qp, &wire, wr->wr.ud.remote_qpn & 0xffffffu, qkey, sgid,
			     ah->attr.grh.dgid.raw, wr->sg_list, wr->num_sge, len);
		if (wr->send_flags & IBV_SEND_SIGNALED)
			sib_send_complete(qp, wr->wr_id, IBV_WC_SUCCESS);
	}
	sib_wire_release(c, &wire);
	return 0;
}

/* Tells senders where receive number seq is: in the area (checked now, as
 * the NIC would when it fetches the WQE) they write it themselves. */
static void sib_rxq_publish(struct sib_qp *qp, struct sib_rwqe *w, uint64_t seq)
{
	struct sib_qp_shm *q = qp->shm;
	struct sib_rxq_ent *e = &qp->rxq[seq & (qp->nslots - 1)];
	const struct ibv_sge *g = &w->sge[0];
	uintptr_t lo = (uintptr_t)qp->area;
	w->direct = qp->area && w->num_sge == 1 && g->addr >= lo && g->addr < lo + qp->area_len &&
		    g->length <= lo + qp->area_len - g->addr &&
		    sib_sge_ok(sib_ctx(qp->qp.context), qp->qp.pd, g, true);
	e->off = w->direct ? g->addr - (uintptr_t)q : 0;
	e->len = w->direct ? g->length : 0;
	e->src_qpn = 0;
}

int sib_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct sib_qp *qp = (struct sib_qp *)ibqp;
	uint32_t added = 0;
	int rc = 0;
	for (; wr; wr = wr->next) {
		if (qp->state == IBV_QPS_RESET || wr->num_sge < 0 ||
		    (uint32_t)wr->num_sge > qp->cap.max_recv_sge)
			rc = EINVAL;
		else if (qp->rq_count >= qp->rq_cap)
			rc = ENOMEM;
		if (rc) {
			*bad = wr;
			break;
		}
		if (qp->state == IBV_QPS_ERR) {
			struct ibv_wc wc = {.wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
					    .opcode = IBV_WC_RECV, .qp_num = ibqp->qp_num};
			sib_cq_push((struct sib_cq *)ibqp->recv_cq, &wc, NULL, 0);
			continue;
		}
		struct sib_rwqe *w = &qp->rq[(qp->rq_head + qp->rq_count) % qp->rq_cap];
		w->wr_id = wr->wr_id;
		w->num_sge = wr->num_sge;
		memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(w->sge[0]));
		sib_rxq_publish(qp, w, qp->shm->granted + added);
		qp->rq_count++;
		added++;
	}
	/* Only the owner writes granted (here and in modify_qp, under the
	 * lock), so a plain store publishes; senders never modify it. */
	if (added)
		__atomic_store_n(&qp->shm->granted, qp->shm->granted + added, __ATOMIC_RELEASE);
	return rc;
}

void sib_build_grh(uint8_t *grh, uint32_t len, const uint8_t *sgid, const uint8_t *dgid)
{
	uint32_t vtf = __builtin_bswap32(6u << 28);
	/* Payload length is 16 bits: a message over 64 KiB - 1 (softib only)
	 * says 0 here; byte_len in the completion is what counts. */
	uint16_t paylen = __builtin_bswap16(len > 0xffffu ? 0 : (uint16_t)len);
	memcpy(grh, &vtf, 4);
	memcpy(grh + 4, &paylen, 2);
	grh[6] = 0x1b; /* next header: IBA transport */
	grh[7] = 64;   /* hop limit */
	memcpy(grh + 8, sgid, 16);
	memcpy(grh + 24, dgid, 16);
}

/* Scatters GRH + the slot's len payload bytes into the WQE's SGEs; returns
 * the completion status. */
static enum ibv_wc_status sib_scatter(struct sib_qp *qp, const struct sib_rwqe *w,
				      const struct sib_slot *s, uint32_t len)
{
	struct sib_context *c = sib_ctx(qp->qp.context);
	uint64_t room = 0;
	for (int i = 0; i < w->num_sge; i++) {
		if (!sib_sge_ok(c, qp->qp.pd, &w->sge[i], true))
			return IBV_WC_LOC_PROT_ERR;
		room += w->sge[i].length;
	}
	if (room < SIB_GRH + (uint64_t)len)
		return IBV_WC_LOC_LEN_ERR;
	uint8_t grh[SIB_GRH];
	sib_build_grh(grh, len, s->sgid, s->dgid);
	uint32_t off = 0, total = SIB_GRH + len;
	for (int i = 0; i < w->num_sge && off < total; i++) {
		uint8_t *dst = (uint8_t *)(uintptr_t)w->sge[i].addr;
		uint32_t take = w->sge[i].length < total - off ? w->sge[i].length : total - off;
		for (uint32_t k = 0; k < take;) {
			uint32_t pos = off + k, n;
			if (pos < SIB_GRH) {
				n = SIB_GRH - pos < take - k ? SIB_GRH - pos : take - k;
				memcpy(dst + k, grh + pos, n);
			} else {
				n = take - k;
				copy_bytes(dst + k, s->data + (pos - SIB_GRH), n);
			}
			k += n;
		}
		off += take;
	}
	return IBV_WC_SUCCESS;
}

/* The length a packet's entry or slot header says, if a sender could have
 * written it for receive w: a direct one fits the buffer it went to. Any
 * process of the user can write the ring, so what cannot be true is
 * dropped (the receive completes in error) and counted. */
static bool sib_rx_len_ok(struct sib_qp *qp, const struct sib_rwqe *w, uint32_t len, bool direct)
{
	bool ok = direct ? w->direct && w->sge[0].length >= SIB_GRH &&
				   len <= w->sge[0].length - SIB_GRH
			 : len <= SIB_MAX_MSG;
	if (!ok)
		qp->drop_malformed++;
	return ok;
}

int sib_qp_poll_recv(struct sib_qp *qp, struct ibv_wc *wc, int max)
{
	struct sib_qp_shm *q = qp->shm;
	uint64_t head = q->head, tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
	/* Senders place a packet only against a posted receive, so the ring
	 * never holds more than its slots: a tail further on is a writer that
	 * ignored the rules. Its packets are dropped, and this loop ends. */
	if (tail - head > qp->nslots) {
		qp->drop_malformed++;
		head = tail;
	}
	int got = 0;
	while (got < max && head != tail) {
		if (qp->rq_count == 0) {
			/* Only after a reset raced a sender: the packet has no home. */
			head++;
			continue;
		}
		struct sib_rwqe *w = &qp->rq[qp->rq_head];
		uint32_t i = (uint32_t)head & (qp->nslots - 1);
		const struct sib_rxq_ent *e = &qp->rxq[i];
		uint32_t len = __atomic_load_n(&e->len, __ATOMIC_RELAXED);
		uint32_t src_qpn = __atomic_load_n(&e->src_qpn, __ATOMIC_RELAXED);
		enum ibv_wc_status st;
		if (len & SIB_RXQ_DIRECT) {
			/* Already in place, if it went where this WQE points. */
			len &= ~SIB_RXQ_DIRECT;
			st = sib_rx_len_ok(qp, w, len, true) ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
		} else {
			const struct sib_slot *s = (const struct sib_slot *)(const void *)(
				(const uint8_t *)q + SIB_RING_OFFSET + (size_t)i * SIB_SLOT_SIZE);
			len = __atomic_load_n(&s->len, __ATOMIC_RELAXED);
			src_qpn = __atomic_load_n(&s->src_qpn, __ATOMIC_RELAXED);
			st = sib_rx_len_ok(qp, w, len, false) ? sib_scatter(qp, w, s, len)
							       : IBV_WC_LOC_LEN_ERR;
		}
		wc[got++] = (struct ibv_wc){
			.wr_id = w->wr_id,
			.status = st,
			.opcode = IBV_WC_RECV,
			.byte_len = st == IBV_WC_SUCCESS ? SIB_GRH + len : 0,
			.qp_num = qp->qp.qp_num,
			.src_qp = src_qpn,
			.wc_flags = IBV_WC_GRH,
			.pkey_index = 0,
		};
		qp->rq_head = (qp->rq_head + 1) % qp->rq_cap;
		qp->rq_count--;
		head++;
	}
	if (head != q->head)
		__atomic_store_n(&q->head, head, __ATOMIC_RELEASE);
	return got;
}
