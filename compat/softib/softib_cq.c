/*
 * softib completion queues and completion channels.
 *
 * A channel's fd is a unix datagram socket bound in the fabric directory
 * (0700), because an eventfd cannot be signalled from another process. A
 * sender writes one datagram (the CQ's cookie) only when the receiving CQ
 * is armed, so the fast path makes no system call.
 */
#include "autoconfig.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "compat/softib/softib_int.h"
#include "transport/sys.h"

struct ibv_comp_channel *sib_create_comp_channel(struct ibv_context *ctx)
{
	static unsigned seq;
	struct sib_context *c = sib_ctx(ctx);
	struct sib_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	int n = snprintf(ch->path, sizeof(ch->path), "%s/ch.%llu.%d.%u", c->fab.dir,
			 (unsigned long long)sib_pidns(), (int)getpid(),
			 __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
	int fd = sys()->socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (n < 0 || (size_t)n >= sizeof(a.sun_path) || fd < 0) {
		int err = fd < 0 ? errno : ENAMETOOLONG;
		if (fd >= 0)
			sys()->close(fd);
		free(ch);
		errno = err;
		return NULL;
	}
	memcpy(a.sun_path, ch->path, (size_t)n + 1);
	unlink(ch->path); /* a leftover of an earlier process with our pid */
	if (sys()->bind(fd, (struct sockaddr *)&a, sizeof(a))) {
		int err = errno;
		sys()->close(fd);
		free(ch);
		errno = err;
		return NULL;
	}
	ch->ch.context = ctx;
	ch->ch.fd = fd;
	return &ch->ch;
}

int sib_destroy_comp_channel(struct ibv_comp_channel *chan)
{
	struct sib_channel *ch = (struct sib_channel *)chan;
	if (ch->cqs)
		return EBUSY;
	sys()->close(ch->ch.fd);
	unlink(ch->path);
	free(ch);
	return 0;
}

struct ibv_cq *sib_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *chan, int vec)
{
	if (cqe < 1 || cqe > SIB_MAX_CQE || vec != 0) {
		errno = EINVAL;
		return NULL;
	}
	struct sib_cq *cq = calloc(1, sizeof(*cq));
	/* Not zeroed: only entries between head and tail are read, each
	 * written first, and a ring the size of the receive queue zeroed
	 * cost every fork-per-connection child a page fault per 4 KiB of it
	 * (pgbench -S -C over softib: 47 us of each backend's start). */
	if (cq)
		cq->ring = malloc((size_t)cqe * sizeof(*cq->ring));
	if (!cq || !cq->ring) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	cq->cap = (uint32_t)cqe;
	cq->cq.context = ctx;
	cq->cq.channel = chan;
	cq->cq.cq_context = cq_context;
	cq->cq.cqe = cqe;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	if (chan) {
		struct sib_channel *ch = (struct sib_channel *)chan;
		cq->next_on_channel = ch->cqs;
		ch->cqs = cq;
		chan->refcnt++;
	}
	return &cq->cq;
}

int sib_destroy_cq(struct ibv_cq *ibcq)
{
	struct sib_cq *cq = (struct sib_cq *)ibcq;
	if (cq->n_rqps)
		return EBUSY;
	if (ibcq->channel) {
		struct sib_channel *ch = (struct sib_channel *)ibcq->channel;
		for (struct sib_cq **p = &ch->cqs; *p; p = &(*p)->next_on_channel)
			if (*p == cq) {
				*p = cq->next_on_channel;
				break;
			}
		ibcq->channel->refcnt--;
	}
	pthread_mutex_destroy(&ibcq->mutex);
	pthread_cond_destroy(&ibcq->cond);
	free(cq->rqps);
	free(cq->ring);
	free(cq);
	return 0;
}

void sib_cq_attach_rqp(struct sib_cq *cq, struct sib_qp *qp)
{
	struct sib_qp **n = realloc(cq->rqps, (cq->n_rqps + 1) * sizeof(*n));
	if (!n)
		abort(); /* a handful of pointers; create_qp checked the rest */
	cq->rqps = n;
	cq->rqps[cq->n_rqps++] = qp;
}

void sib_cq_detach_rqp(struct sib_cq *cq, struct sib_qp *qp)
{
	for (unsigned i = 0; i < cq->n_rqps; i++)
		if (cq->rqps[i] == qp) {
			cq->rqps[i] = cq->rqps[--cq->n_rqps];
			break;
		}
	cq->rr = 0;
}

static void sib_cq_self_wake(struct sib_cq *cq)
{
	struct sib_channel *ch = (struct sib_channel *)cq->cq.channel;
	struct sib_context *c = sib_ctx(cq->cq.context);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", ch->path);
	uint64_t cookie = (uintptr_t)cq;
	(void)sys()->sendto(c->wake_sock, &cookie, sizeof(cookie), MSG_DONTWAIT, (struct sockaddr *)&a,
		     sizeof(a));
}

/* Adds a locally made completion (send, error, flush). */
int sib_cq_push(struct sib_cq *cq, const struct ibv_wc *wc, struct sib_qp *qp, uint64_t sq_pos)
{
	if (cq->tail - cq->head >= cq->cap) {
		cq->overrun = true;
		return ENOSPC;
	}
	struct sib_cqe *e = &cq->ring[cq->tail++ % cq->cap];
	e->wc = *wc;
	e->qp = qp;
	e->sq_pos = sq_pos;
	if (cq->armed && !cq->self_woken && cq->cq.channel) {
		cq->self_woken = true;
		sib_cq_self_wake(cq);
	}
	return 0;
}

int sib_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct sib_cq *cq = (struct sib_cq *)ibcq;
	if (cq->overrun)
		return -EOVERFLOW; /* a real CQ overrun is fatal to the CQ too */
	int got = 0;
	while (got < n && cq->head != cq->tail) {
		struct sib_cqe *e = &cq->ring[cq->head++ % cq->cap];
		if (e->qp && e->sq_pos > e->qp->sq_retired)
			e->qp->sq_retired = e->sq_pos;
		wc[got++] = e->wc;
	}
	for (unsigned i = 0; i < cq->n_rqps && got < n; i++) {
		struct sib_qp *qp = cq->rqps[(cq->rr + i) % cq->n_rqps];
		got += sib_qp_poll_recv(qp, wc + got, n - got);
	}
	if (cq->n_rqps)
		cq->rr = (cq->rr + 1) % cq->n_rqps;
	/* This "NIC" is the sending process: on a host with more runnable
	 * threads than cores it may be queued behind our busy-polling. A long
	 * run of empty polls gives the core up once; with a core to itself the
	 * caller gets it straight back. */
	if (got)
		cq->empty_polls = 0;
	else if (++cq->empty_polls >= SIB_YIELD_AFTER) {
		cq->empty_polls = 0;
		sched_yield();
	}
	return got;
}

int sib_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct sib_cq *cq = (struct sib_cq *)ibcq;
	if (!ibcq->channel)
		return EINVAL;
	cq->armed = true;
	cq->self_woken = false;
	for (unsigned i = 0; i < cq->n_rqps; i++)
		__atomic_store_n(&cq->rqps[i]->shm->armed, 1, __ATOMIC_RELAXED);
	/* Pairs with the sender's fence after publishing a packet. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return 0;
}

int sib_get_cq_event(struct ibv_comp_channel *chan, struct ibv_cq **out, void **cq_context)
{
	struct sib_channel *ch = (struct sib_channel *)chan;
	for (;;) {
		uint64_t cookie;
		ssize_t r = sys()->recv(chan->fd, &cookie, sizeof(cookie), 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r != sizeof(cookie))
			continue;
		struct sib_cq *cq = ch->cqs;
		while (cq && (uintptr_t)cq != cookie)
			cq = cq->next_on_channel;
		/* One event per arm: QPs that share the CQ may each have woken it. */
		if (!cq || !cq->armed)
			continue;
		cq->armed = false;
		for (unsigned i = 0; i < cq->n_rqps; i++)
			__atomic_store_n(&cq->rqps[i]->shm->armed, 0, __ATOMIC_RELAXED);
		cq->events++;
		*out = &cq->cq;
		*cq_context = cq->cq.cq_context;
		return 0;
	}
}

void sib_ack_cq_events(struct ibv_cq *ibcq, unsigned int n)
{
	struct sib_cq *cq = (struct sib_cq *)ibcq;
	cq->acked += n;
}
