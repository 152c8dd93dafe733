/*
 * libFuzzer target: softib's receive ring as its two readers see it. Any
 * process of the user can write a QP's ring file, so the owner polling for
 * packets (sib_qp_poll_recv) and a sender placing one (sib_wire_put) must
 * stay inside their buffers and their mapping, and finish, whatever the
 * ring's header, slots and receive entries say.
 *
 * The ring lies in ordinary heap memory here, where AddressSanitizer sees
 * every byte past its end, and so do the receive buffers posted outside
 * its area. The input is a list of operations:
 *   0 off len bytes  a hostile write: len (<= 16) bytes at off into the
 *                    header (its lock aside), the receive entries or a slot
 *                    header, chosen by off
 *   1 kind lo hi     post a receive of (hi << 8 | lo) bytes: in the area
 *                    (kind odd) or in its own heap buffer
 *   2 lo hi          a sender places a packet of (hi << 8 | lo) * 4 bytes
 *   3 max            poll up to max + 1 completions
 * A completion that says more bytes than its buffer holds is a finding
 * (the consumer, nic_ib, reads that many), as is any report.
 */
#include "autoconfig.h"

#include <stdlib.h>
#include <string.h>

#include "compat/softib/softib.h"
#include "compat/softib/softib_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NSLOTS 4u
#define AREA (64u << 10)
#define QKEY 0x11111111u
#define MAX_POSTS 64u

static struct sib_context ctx;
static struct sib_pd pd;
static struct sib_qp rx, tx; /* the owner of the ring, a sender */
static uint8_t *ring;
static size_t ring_len, rxq_at; /* as the owner laid it out */
static struct ibv_mr *area_mr;
static uint8_t payload[SIB_MAX_MSG];

static struct {
	uint8_t *heap; /* its own buffer, or NULL: in the area */
	struct ibv_mr *mr;
	uint32_t len;
} posts[MAX_POSTS];
static unsigned nposts;
static size_t area_next;

static void setup(void)
{
	pthread_mutex_init(&ctx.lock, NULL);
	ctx.fab.shm = calloc(1, sizeof(*ctx.fab.shm));
	ctx.wake_sock = -1;
	pd.pd.context = &ctx.ctx;
	rx.qp.context = tx.qp.context = &ctx.ctx;
	rx.qp.pd = tx.qp.pd = &pd.pd;
	rx.qp.qp_num = 0x402;
	tx.qp.qp_num = 0x403;
	rx.rq_cap = NSLOTS;
	rx.rq = calloc(NSLOTS, sizeof(*rx.rq));
	rx.cap.max_recv_sge = 1;
	ring_len = sib_ring_len(NSLOTS, AREA);
	ring = aligned_alloc(4096, ring_len);
	if (!ctx.fab.shm || !rx.rq || !ring)
		abort();
	struct sib_dir_entry *e = &ctx.fab.shm->dir[rx.qp.qp_num & (SIB_MAX_QPS - 1)];
	e->qpn = rx.qp.qp_num;
	e->live = 1;
	memset(payload, 0xab, sizeof(payload));
}

/* A fresh ring, as create_qp and modify_qp to RTR leave it. */
static void ring_reset(void)
{
	memset(ring, 0, ring_len);
	sib_ring_init(&rx, ring, NSLOTS, AREA);
	rxq_at = rx.shm->rxq_off;
	rx.shm->qkey = rx.qkey = QKEY;
	rx.shm->rx_ready = 1;
	rx.state = rx.qp.state = IBV_QPS_RTR;
	rx.rq_head = rx.rq_count = 0;
	area_mr = verbs_api_softib.reg_mr(&pd.pd, rx.area, rx.area_len, IBV_ACCESS_LOCAL_WRITE);
	if (!area_mr)
		abort();
	nposts = 0;
	area_next = 0;
}

/* What another process may write: anything but the lock (a writer holding
 * it stalls senders, as any same-user process could by stopping one). */
static void poke(unsigned off, const uint8_t *bytes, size_t len)
{
	uint8_t *dst;
	size_t room;
	const size_t lock_lo = offsetof(struct sib_qp_shm, lock);
	const size_t lock_hi = lock_lo + sizeof(pthread_mutex_t);
	switch (off % 3) {
	case 0:
		off = (off / 3) % sizeof(struct sib_qp_shm);
		if (off + len > lock_lo && off < lock_hi)
			off = (unsigned)lock_hi;
		dst = ring + off;
		room = sizeof(struct sib_qp_shm) - off;
		break;
	case 1:
		off = (off / 3) % (NSLOTS * sizeof(struct sib_rxq_ent));
		dst = ring + rxq_at + off;
		room = NSLOTS * sizeof(struct sib_rxq_ent) - off;
		break;
	default:
		off = (off / 3) % (NSLOTS * SIB_SLOT_HDR);
		dst = ring + SIB_RING_OFFSET + (off / SIB_SLOT_HDR) * SIB_SLOT_SIZE + off % SIB_SLOT_HDR;
		room = SIB_SLOT_HDR - off % SIB_SLOT_HDR;
		break;
	}
	memcpy(dst, bytes, len < room ? len : room);
}

static void post(bool in_area, uint32_t len)
{
	if (nposts == MAX_POSTS || len == 0)
		return;
	struct ibv_sge sge = {.length = len};
	uint8_t *heap = NULL;
	struct ibv_mr *mr = NULL;
	if (in_area) {
		if (len > AREA - area_next)
			area_next = 0;
		if (len > AREA)
			return;
		sge.addr = (uintptr_t)(rx.area + area_next);
		sge.lkey = area_mr->lkey;
		area_next += len;
	} else {
		heap = malloc(len);
		mr = heap ? verbs_api_softib.reg_mr(&pd.pd, heap, len, IBV_ACCESS_LOCAL_WRITE) : NULL;
		if (!mr) {
			free(heap);
			return;
		}
		sge.addr = (uintptr_t)heap;
		sge.lkey = mr->lkey;
	}
	struct ibv_recv_wr wr = {.wr_id = nposts, .sg_list = &sge, .num_sge = 1}, *bad;
	posts[nposts].heap = heap;
	posts[nposts].mr = mr;
	posts[nposts].len = len;
	nposts++;
	if (sib_post_recv(&rx.qp, &wr, &bad) != 0) {
		nposts--;
		if (mr)
			verbs_api_softib.dereg_mr(mr);
		free(heap);
	}
}

static void send_one(uint32_t len)
{
	struct sib_wire w = {.q = rx.shm, .len = ring_len, .qpn = rx.qp.qp_num};
	sib_shm_lock(&rx.shm->lock); /* sib_wire_hold's, for the QP it holds */
	struct ibv_sge sge = {.addr = (uintptr_t)payload, .length = len};
	uint8_t gid[16] = {0};
	sib_wire_put(&ctx, &tx, &w, rx.qp.qp_num, QKEY, gid, gid, &sge, 1, len);
	sib_wire_release(&ctx, &w);
}

static unsigned poll_some(int max)
{
	struct ibv_wc wc[32];
	int n = sib_qp_poll_recv(&rx, wc, max);
	if (n < 0 || n > max)
		abort();
	for (int i = 0; i < n; i++) {
		if (wc[i].wr_id >= nposts)
			abort(); /* a completion for no receive */
		if (wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len > posts[wc[i].wr_id].len)
			abort(); /* more than the buffer holds */
	}
	return (unsigned)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ring)
		setup();
	ring_reset();
	while (size > 0) {
		uint8_t op = data[0] & 3;
		data++, size--;
		if (op == 0 && size >= 3) {
			unsigned off = (unsigned)data[0] | (unsigned)data[1] << 8;
			size_t len = data[2] % 17 < size - 3 ? data[2] % 17 : size - 3;
			poke(off, data + 3, len);
			data += 3 + len, size -= 3 + len;
		} else if (op == 1 && size >= 3) {
			post(data[0] & 1, (uint32_t)data[1] | (uint32_t)data[2] << 8);
			data += 3, size -= 3;
		} else if (op == 2 && size >= 2) {
			uint32_t len = ((uint32_t)data[0] | (uint32_t)data[1] << 8) * 4;
			send_one(len < SIB_MAX_MSG ? len : SIB_MAX_MSG);
			data += 2, size -= 2;
		} else if (op == 3 && size >= 1) {
			poll_some(data[0] % 32 + 1);
			data++, size--;
		} else {
			break;
		}
	}
	/* Whatever the ring says, a poll takes at most what was posted. */
	for (unsigned i = 0; i < NSLOTS + 1 && poll_some(32); i++)
		;
	for (unsigned i = 0; i < nposts; i++) {
		if (posts[i].mr)
			verbs_api_softib.dereg_mr(posts[i].mr);
		free(posts[i].heap);
	}
	verbs_api_softib.dereg_mr(area_mr);
	return 0;
}
