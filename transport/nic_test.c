/* The in-process test nic: packets cross a fabric of bounded queues, in order, by copy. */
#include "autoconfig.h"

#include "transport/nic_test.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "transport/config.h"
#include "transport/log.h"
#include "transport/stats.h"
#include "transport/sys.h"

/*
 * One mutex per fabric guards every nic's queue and the address table: a
 * sender writes into the receiver's queue while the receiver's owner, maybe
 * on another thread, reads it. Protocol tests do not need more speed than
 * that, and one lock cannot be taken in the wrong order.
 */
struct nic_test_fabric {
	pthread_mutex_t lock;
	uint32_t id; /* tells routes from different fabrics apart */
	struct nic_test **nics; /* by address - 1; NULL once closed */
	uint32_t n_nics, cap_nics;
	unsigned open;
};

struct nic_test {
	struct nic base;
	struct nic_test_fabric *fabric;
	uint32_t addr;
	int efd;
	/*
	 * The receive ring is queue_len buffers of max_pkt_size, as on a NIC:
	 * a buffer is free (on the free stack), queued (in the ring, waiting for
	 * rx_burst) or out (held by the owner until post_recvs). A packet that
	 * finds no free buffer is dropped and counted.
	 */
	unsigned nbufs;
	size_t stride;
	uint8_t *bufs;
	uint32_t *free_stack;
	unsigned nfree;
	uint32_t *ring; /* buffer indices, oldest at head */
	uint32_t *ring_len;
	unsigned head, count;
	uint64_t overflows;
	uint64_t arrivals;     /* packets that reached this nic */
	uint64_t lose_at[16];  /* arrival numbers the "wire" loses (tests) */
	unsigned n_lose_at;
};

/* The route's data: fabric id then address, little endian. */
#define NIC_TEST_ROUTE_LEN 8

struct nic_peer {
	uint32_t fabric_id;
	uint32_t addr;
};

static uint32_t nic_test_next_fabric_id;

static struct nic_test *nic_test_of(struct nic *nic)
{
	return (struct nic_test *)nic;
}

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

struct nic_test_fabric *nic_test_fabric_create(void)
{
	struct nic_test_fabric *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	pthread_mutex_init(&f->lock, NULL);
	f->id = __atomic_add_fetch(&nic_test_next_fabric_id, 1, __ATOMIC_RELAXED);
	return f;
}

void nic_test_fabric_destroy(struct nic_test_fabric *fabric)
{
	if (!fabric)
		return;
	if (fabric->open) {
		/* Its nics would point at freed memory: a bug in the test. */
		ferry_log(FERRY_LOG_ERROR, "nic test: fabric destroyed with %u nics open",
			  fabric->open);
		abort();
	}
	pthread_mutex_destroy(&fabric->lock);
	free(fabric->nics);
	free(fabric);
}

/* Copies one packet into dst's ring; called with the fabric lock held. */
static void nic_test_deliver(struct nic_test *dst, const struct nic_tx *pkt, uint32_t len)
{
	dst->arrivals++;
	for (unsigned i = 0; i < dst->n_lose_at; i++) {
		if (dst->lose_at[i] == dst->arrivals) {
			dst->lose_at[i] = dst->lose_at[--dst->n_lose_at];
			return;
		}
	}
	if (len > dst->base.max_pkt_size) {
		if (dst->base.stats)
			stats_drop(dst->base.stats, size);
		return;
	}
	if (dst->nfree == 0) {
		dst->overflows++;
		if (dst->base.stats)
			stats_drop(dst->base.stats, nomem);
		return;
	}
	uint32_t b = dst->free_stack[--dst->nfree];
	uint8_t *p = dst->bufs + (size_t)b * dst->stride;
	for (unsigned i = 0; i < pkt->nsge; i++) {
		memcpy(p, pkt->sge[i].addr, pkt->sge[i].len);
		p += pkt->sge[i].len;
	}
	unsigned tail = (dst->head + dst->count) % dst->nbufs;
	dst->ring[tail] = b;
	dst->ring_len[tail] = len;
	/* Only the empty -> non-empty edge needs a wake-up: arm_notify drains the
	 * eventfd before it looks at the queue, so no arrival is missed. */
	if (dst->count++ == 0) {
		uint64_t one = 1;
		ssize_t r = sys()->write(dst->efd, &one, sizeof(one));
		(void)r; /* EAGAIN only when the counter is saturated: already readable */
	}
}

static unsigned nic_test_tx_burst(struct nic *nic, const struct nic_tx *pkts, unsigned n)
{
	struct nic_test *t = nic_test_of(nic);
	struct nic_test_fabric *f = t->fabric;
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < n; i++) {
		const struct nic_tx *pkt = &pkts[i];
		uint32_t len = 0;
		for (unsigned s = 0; s < pkt->nsge; s++)
			len += pkt->sge[s].len;
		/* Oversized or to a closed address: lost on the wire, as UDP would. */
		if (len > nic->max_pkt_size) {
			if (nic->stats)
				stats_drop(nic->stats, size);
			continue;
		}
		uint32_t a = pkt->peer->addr;
		if (a == 0 || a > f->n_nics || !f->nics[a - 1])
			continue;
		nic_test_deliver(f->nics[a - 1], pkt, len);
	}
	pthread_mutex_unlock(&f->lock);
	return n;
}

static unsigned nic_test_rx_burst(struct nic *nic, struct nic_rx *out, unsigned max)
{
	struct nic_test *t = nic_test_of(nic);
	pthread_mutex_lock(&t->fabric->lock);
	unsigned n = 0;
	while (n < max && t->count > 0) {
		uint32_t b = t->ring[t->head];
		out[n].pkt = t->bufs + (size_t)b * t->stride;
		out[n].len = t->ring_len[t->head];
		out[n].buf = out[n].pkt;
		t->head = (t->head + 1) % t->nbufs;
		t->count--;
		n++;
	}
	pthread_mutex_unlock(&t->fabric->lock);
	return n;
}

static void nic_test_post_recvs(struct nic *nic, void *const *bufs, unsigned n)
{
	struct nic_test *t = nic_test_of(nic);
	pthread_mutex_lock(&t->fabric->lock);
	for (unsigned i = 0; i < n; i++) {
		size_t off = (size_t)((uint8_t *)bufs[i] - t->bufs);
		if (off % t->stride || off / t->stride >= t->nbufs || t->nfree >= t->nbufs) {
			/* Not one of ours, or given back twice: a bug in the caller. */
			ferry_log(FERRY_LOG_ERROR, "nic test: post_recvs got a foreign buffer %p",
				  bufs[i]);
			abort();
		}
		t->free_stack[t->nfree++] = (uint32_t)(off / t->stride);
	}
	pthread_mutex_unlock(&t->fabric->lock);
}

/* tx_burst copies, so nothing is ever left to wait for. */
static void nic_test_flush(struct nic *nic) {}

static int nic_test_notify_fd(const struct nic *nic)
{
	return ((const struct nic_test *)nic)->efd;
}

static int nic_test_arm_notify(struct nic *nic)
{
	struct nic_test *t = nic_test_of(nic);
	uint64_t v;
	if (sys()->read(t->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return -errno;
	pthread_mutex_lock(&t->fabric->lock);
	int waiting = t->count > 0;
	pthread_mutex_unlock(&t->fabric->lock);
	return waiting;
}

static int nic_test_reg_mem(struct nic *nic, void *addr, size_t len, struct nic_mr *out)
{
	out->lkey = 0;
	out->handle = NULL;
	return 0;
}

static void nic_test_dereg_mem(struct nic *nic, struct nic_mr *mr) {}

static bool nic_test_pins_memory(const struct nic *nic)
{
	return false;
}

static void nic_test_local_route(const struct nic *nic, struct nic_route *out)
{
	const struct nic_test *t = (const struct nic_test *)nic;
	memset(out, 0, sizeof(*out));
	out->kind = FERRY_TRANSPORT_TEST;
	out->len = NIC_TEST_ROUTE_LEN;
	put_u32(out->data, t->fabric->id);
	put_u32(out->data + 4, t->addr);
}

/* A fabric address is complete already. */
static void nic_test_route_fixup(const struct nic *nic, struct nic_route *route,
				 const struct sockaddr *seen, socklen_t seen_len)
{
}

static int nic_test_peer_create(struct nic *nic, const struct nic_route *route,
				struct nic_peer **out)
{
	const struct nic_test *t = nic_test_of(nic);
	if (route->kind != FERRY_TRANSPORT_TEST || route->len != NIC_TEST_ROUTE_LEN)
		return -EAFNOSUPPORT;
	if (get_u32(route->data) != t->fabric->id || get_u32(route->data + 4) == 0)
		return -EHOSTUNREACH;
	struct nic_peer *p = malloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->fabric_id = get_u32(route->data);
	p->addr = get_u32(route->data + 4);
	*out = p;
	return 0;
}

static void nic_test_peer_destroy(struct nic *nic, struct nic_peer *peer)
{
	free(peer);
}

static void nic_test_route_format(const struct nic_route *route, char *buf, size_t cap)
{
	if (route->kind != FERRY_TRANSPORT_TEST || route->len != NIC_TEST_ROUTE_LEN) {
		snprintf(buf, cap, "test:?");
		return;
	}
	snprintf(buf, cap, "test:%" PRIu32 ".%" PRIu32, get_u32(route->data),
		 get_u32(route->data + 4));
}

static void nic_test_free(struct nic_test *t)
{
	if (t->efd >= 0)
		sys()->close(t->efd);
	free(t->bufs);
	free(t->free_stack);
	free(t->ring);
	free(t->ring_len);
	free(t);
}

static void nic_test_close(struct nic *nic)
{
	struct nic_test *t = nic_test_of(nic);
	struct nic_test_fabric *f = t->fabric;
	pthread_mutex_lock(&f->lock);
	f->nics[t->addr - 1] = NULL;
	f->open--;
	pthread_mutex_unlock(&f->lock);
	nic_test_free(t);
}

static const struct nic_ops nic_test_ops = {
	.tx_burst = nic_test_tx_burst,
	.rx_burst = nic_test_rx_burst,
	.post_recvs = nic_test_post_recvs,
	.flush = nic_test_flush,
	.notify_fd = nic_test_notify_fd,
	.arm_notify = nic_test_arm_notify,
	.reg_mem = nic_test_reg_mem,
	.dereg_mem = nic_test_dereg_mem,
	.pins_memory = nic_test_pins_memory,
	.local_route = nic_test_local_route,
	.route_fixup = nic_test_route_fixup,
	.peer_create = nic_test_peer_create,
	.peer_destroy = nic_test_peer_destroy,
	.route_format = nic_test_route_format,
	.close = nic_test_close,
};

/* Takes the next address on the fabric; called with the fabric lock held. */
static int nic_test_attach(struct nic_test_fabric *f, struct nic_test *t)
{
	if (f->n_nics == f->cap_nics) {
		uint32_t cap = f->cap_nics ? 2 * f->cap_nics : 8;
		struct nic_test **nics = realloc(f->nics, cap * sizeof(*nics));
		if (!nics)
			return -ENOMEM;
		f->nics = nics;
		f->cap_nics = cap;
	}
	f->nics[f->n_nics++] = t;
	t->addr = f->n_nics; /* addresses are never reused, so stale routes go nowhere */
	f->open++;
	return 0;
}

struct nic *nic_test_open(struct nic_test_fabric *fabric, uint32_t max_pkt_size,
			  unsigned queue_len, struct ferry_stats *stats)
{
	if (!fabric || max_pkt_size == 0 || queue_len == 0)
		return NULL;
	struct nic_test *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->base.ops = &nic_test_ops;
	t->base.name = "test";
	t->base.max_pkt_size = max_pkt_size;
	t->base.stats = stats;
	t->fabric = fabric;
	t->nbufs = queue_len;
	t->base.rx_keep_max = queue_len / 4;
	/* Keep every packet 8-byte aligned, as the header codec may expect. */
	t->stride = ((size_t)max_pkt_size + 63) & ~(size_t)63;
	t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	t->bufs = malloc(t->stride * queue_len);
	t->free_stack = malloc(queue_len * sizeof(uint32_t));
	t->ring = malloc(queue_len * sizeof(uint32_t));
	t->ring_len = malloc(queue_len * sizeof(uint32_t));
	if (t->efd < 0 || !t->bufs || !t->free_stack || !t->ring || !t->ring_len) {
		nic_test_free(t);
		return NULL;
	}
	/* Hand out low buffers first, so a short test touches little memory. */
	for (unsigned i = 0; i < queue_len; i++)
		t->free_stack[i] = queue_len - 1 - i;
	t->nfree = queue_len;
	pthread_mutex_lock(&fabric->lock);
	int err = nic_test_attach(fabric, t);
	pthread_mutex_unlock(&fabric->lock);
	if (err) {
		nic_test_free(t);
		return NULL;
	}
	return &t->base;
}

int nic_test_lose_arrival(struct nic *nic, uint64_t nth)
{
	struct nic_test *t = nic_test_of(nic);
	pthread_mutex_lock(&t->fabric->lock);
	int rc = -ENOSPC;
	if (nth > 0 && t->n_lose_at < sizeof(t->lose_at) / sizeof(t->lose_at[0])) {
		t->lose_at[t->n_lose_at++] = t->arrivals + nth;
		rc = 0;
	}
	pthread_mutex_unlock(&t->fabric->lock);
	return rc;
}

uint64_t nic_test_overflows(const struct nic *nic)
{
	const struct nic_test *t = (const struct nic_test *)nic;
	pthread_mutex_lock(&t->fabric->lock);
	uint64_t n = t->overflows;
	pthread_mutex_unlock(&t->fabric->lock);
	return n;
}
