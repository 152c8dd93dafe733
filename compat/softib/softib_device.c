/* softib's device, context, queries, PDs, MRs and AHs, and its verbs seam. */
#include "autoconfig.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "compat/softib/softib.h"
#include "compat/softib/softib_int.h"
#include "transport/config.h"
#include "transport/sys.h"
#include "transport/txdefer.h"

/* The device list holds one device, for the fabric the caller names. */
static struct ibv_device **sib_get_device_list(const struct ferry_config *cfg, int *num)
{
	const char *fabric = cfg ? cfg->softib_fabric : NULL;
	struct ibv_device **list = calloc(2, sizeof(*list));
	struct sib_device *d = calloc(1, sizeof(*d));
	if (!list || !d) {
		free(list);
		free(d);
		errno = ENOMEM;
		if (num)
			*num = 0;
		return NULL;
	}
	d->dev.node_type = IBV_NODE_CA;
	d->dev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->dev.name, sizeof(d->dev.name), "softib0");
	snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "softib0");
	snprintf(d->fabric, sizeof(d->fabric), "%s", fabric && *fabric ? fabric : "default");
	list[0] = &d->dev;
	if (num)
		*num = 1;
	return list;
}

static void sib_free_device_list(struct ibv_device **list)
{
	if (!list)
		return;
	for (struct ibv_device **p = list; *p; p++)
		free(*p);
	free(list);
}

static const char *sib_get_device_name(struct ibv_device *dev)
{
	return dev->name;
}

static struct ibv_context *sib_open_device(struct ibv_device *dev)
{
	struct sib_device *d = (struct sib_device *)dev;
	struct sib_context *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	int rc = sib_fabric_open(&c->fab, d->fabric);
	if (rc) {
		free(c);
		errno = rc;
		return NULL;
	}
	c->wake_sock = sys()->socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->wake_sock < 0) {
		rc = errno;
		sib_fabric_close(&c->fab);
		free(c);
		errno = rc;
		return NULL;
	}
	pthread_mutex_init(&c->lock, NULL);
	uint32_t seed = 0;
	if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (uint32_t)getpid();
	c->mr_seq = seed;
	c->key_tag = __atomic_fetch_add(&c->fab.shm->next_ctx, 1, __ATOMIC_RELAXED) &
		     SIB_KEY_TAG_MASK;
	/* The device outlives the list it came from, so the context points at
	 * its own copy. */
	struct sib_device *copy = malloc(sizeof(*copy));
	if (!copy) {
		sys()->close(c->wake_sock);
		sib_fabric_close(&c->fab);
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	*copy = *d;
	c->ctx.device = &copy->dev;
	c->ctx.cmd_fd = -1;
	c->ctx.async_fd = -1;
	c->ctx.num_comp_vectors = 1;
	pthread_mutex_init(&c->ctx.mutex, NULL);
	/* The inline datapath verbs in verbs.h dispatch through these. */
	c->ctx.ops.post_send = sib_post_send;
	c->ctx.ops.post_recv = sib_post_recv;
	c->ctx.ops.poll_cq = sib_poll_cq;
	c->ctx.ops.req_notify_cq = sib_req_notify_cq;
	return &c->ctx;
}

static int sib_close_device(struct ibv_context *ctx)
{
	struct sib_context *c = sib_ctx(ctx);
	txdefer_quiesce(); /* staged wake-ups go out on wake_sock */
	sib_peer_maps_free(c);
	for (unsigned i = 0; i < SIB_MAX_MR; i++)
		free(c->mrs[i]);
	sys()->close(c->wake_sock);
	sib_fabric_close(&c->fab);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->ctx.mutex);
	free(c->ctx.device);
	free(c);
	return 0;
}

static int sib_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "softib %u", SIB_VERSION);
	a->node_guid = 0;
	a->vendor_id = 0xffffff;
	a->max_mr_size = UINT64_MAX;
	a->page_size_cap = 4096;
	a->max_qp = SIB_MAX_QPS;
	a->max_qp_wr = SIB_MAX_QP_WR;
	a->max_sge = SIB_MAX_SGE;
	a->max_cq = 1024;
	a->max_cqe = SIB_MAX_CQE;
	a->max_mr = SIB_MAX_MR;
	a->max_pd = 1024;
	a->max_ah = 65536;
	a->max_pkeys = 1;
	a->phys_port_cnt = 1;
	return 0;
}

static int sib_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a)
{
	if (port != 1)
		return EINVAL;
	memset(a, 0, sizeof(*a));
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = IBV_MTU_4096;
	a->gid_tbl_len = SIB_GID_TBL;
	a->max_msg_sz = SIB_MAX_MSG; /* over the MTU: see SIB_MAX_MSG */
	a->pkey_tbl_len = 1;
	a->lid = 0;
	a->sm_lid = 0;
	a->phys_state = 5; /* LinkUp */
	a->active_width = 1;
	a->active_speed = 1;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	return 0;
}

static int sib_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
			    struct ibv_gid_entry *e)
{
	struct sib_context *c = sib_ctx(ctx);
	if (port != 1 || index >= SIB_GID_TBL)
		return EINVAL;
	memset(e, 0, sizeof(*e));
	memcpy(e->gid.raw, c->fab.shm->gid[index], 16);
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = index % 2 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
	return 0;
}

bool sib_gid_is_ours(const struct sib_fabric *fab, const uint8_t *gid)
{
	for (unsigned i = 0; i < SIB_GID_TBL; i++)
		if (!memcmp(fab->shm->gid[i], gid, 16))
			return true;
	return false;
}

static struct ibv_pd *sib_alloc_pd(struct ibv_context *ctx)
{
	struct sib_pd *p = calloc(1, sizeof(*p));
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	p->pd.context = ctx;
	return &p->pd;
}

void sib_pd_ref(struct ibv_pd *pd, int delta)
{
	((struct sib_pd *)pd)->refs += (unsigned)delta;
}

static int sib_dealloc_pd(struct ibv_pd *pd)
{
	struct sib_pd *p = (struct sib_pd *)pd;
	if (p->refs)
		return EBUSY;
	free(p);
	return 0;
}

/*
 * lkey = context tag << 20 | slot << 8 | a pseudo-random byte. The byte makes
 * a stale or forged key miss; the tag (a per-fabric counter) keeps the keys
 * of two contexts apart, as an HCA's keys are unique across its contexts.
 * Without it, two contexts' first MRs share slot 1, and one time in 256 a
 * key of one end would be valid at the other.
 */
static struct ibv_mr *sib_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	struct sib_context *c = sib_ctx(pd->context);
	if (!addr || len == 0) {
		errno = EINVAL;
		return NULL;
	}
	struct sib_mr *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&c->lock);
	unsigned slot = SIB_MAX_MR;
	for (unsigned i = 1; i < SIB_MAX_MR; i++)
		if (!c->mrs[i]) {
			slot = i;
			break;
		}
	if (slot == SIB_MAX_MR) {
		pthread_mutex_unlock(&c->lock);
		free(m);
		errno = ENOMEM;
		return NULL;
	}
	c->mr_seq = c->mr_seq * 1103515245u + 12345u;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = len;
	m->mr.handle = slot;
	m->mr.lkey = c->key_tag << SIB_KEY_TAG_SHIFT | slot << 8 | ((c->mr_seq >> 16) & 0xffu);
	m->mr.rkey = m->mr.lkey;
	m->access = access;
	__atomic_store_n(&c->mrs[slot], m, __ATOMIC_RELEASE);
	sib_pd_ref(pd, 1);
	pthread_mutex_unlock(&c->lock);
	return &m->mr;
}

static int sib_dereg_mr(struct ibv_mr *mr)
{
	struct sib_context *c = sib_ctx(mr->context);
	struct sib_mr *m = (struct sib_mr *)mr;
	pthread_mutex_lock(&c->lock);
	__atomic_store_n(&c->mrs[mr->handle], NULL, __ATOMIC_RELEASE);
	sib_pd_ref(mr->pd, -1);
	pthread_mutex_unlock(&c->lock);
	free(m);
	return 0;
}

struct sib_mr *sib_mr_find(struct sib_context *c, uint32_t lkey)
{
	uint32_t slot = (lkey >> 8) & (SIB_MAX_MR - 1);
	if (slot == 0)
		return NULL;
	struct sib_mr *m = __atomic_load_n(&c->mrs[slot], __ATOMIC_ACQUIRE);
	return m && m->mr.lkey == lkey ? m : NULL;
}

/* A RoCE port: every AH needs a GRH whose GID this fabric owns. */
static struct ibv_ah *sib_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sib_context *c = sib_ctx(pd->context);
	if (attr->port_num != 1 || !attr->is_global || attr->grh.sgid_index >= SIB_GID_TBL) {
		errno = EINVAL;
		return NULL;
	}
	if (!sib_gid_is_ours(&c->fab, attr->grh.dgid.raw)) {
		errno = EHOSTUNREACH;
		return NULL;
	}
	struct sib_ah *a = calloc(1, sizeof(*a));
	if (!a) {
		errno = ENOMEM;
		return NULL;
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	a->attr = *attr;
	sib_pd_ref(pd, 1);
	return &a->ah;
}

static int sib_destroy_ah(struct ibv_ah *ah)
{
	sib_pd_ref(ah->pd, -1);
	free(ah);
	return 0;
}

unsigned softib_reclaim(struct ibv_context *ctx)
{
	return sib_fabric_reclaim(&sib_ctx(ctx)->fab);
}

unsigned softib_live_qps(struct ibv_context *ctx)
{
	const struct sib_fabric_shm *s = sib_ctx(ctx)->fab.shm;
	unsigned n = 0;
	for (unsigned i = 0; i < SIB_MAX_QPS; i++)
		n += __atomic_load_n(&s->dir[i].live, __ATOMIC_RELAXED) != 0;
	return n;
}

bool softib_qpn_live(struct ibv_context *ctx, uint32_t qpn)
{
	return sib_fabric_qp_live(&sib_ctx(ctx)->fab, qpn);
}

int softib_qp_counters(struct ibv_qp *qp, struct softib_qp_counters *out)
{
	struct sib_qp *q = (struct sib_qp *)qp;
	if (!q->shm)
		return EINVAL;
	out->rx_pkts = __atomic_load_n(&q->shm->rx_pkts, __ATOMIC_RELAXED);
	out->drop_no_recv = __atomic_load_n(&q->shm->drop_no_recv, __ATOMIC_RELAXED);
	out->drop_qkey = __atomic_load_n(&q->shm->drop_qkey, __ATOMIC_RELAXED);
	out->drop_state = __atomic_load_n(&q->shm->drop_state, __ATOMIC_RELAXED);
	out->rx_direct = __atomic_load_n(&q->shm->rx_direct, __ATOMIC_RELAXED);
	out->drop_malformed = q->drop_malformed;
	return 0;
}

int softib_set_rx_area(struct ibv_context *ctx, size_t len)
{
	if (len > ((size_t)1 << 30))
		return EINVAL;
	sib_ctx(ctx)->next_area = (len + 4095u) & ~(size_t)4095u;
	return 0;
}

void *softib_qp_rx_area(struct ibv_qp *qp, size_t *len)
{
	struct sib_qp *q = (struct sib_qp *)qp;
	if (len)
		*len = q->area ? q->area_len : 0;
	return q->area;
}

int softib_fabric_remove(const char *fabric)
{
	return sib_fabric_remove(fabric);
}

int softib_fabric_dir(char *buf, size_t cap)
{
	return sib_dir_path(buf, cap);
}

const struct verbs_api verbs_api_softib = {
	.name = "softib",
	.kind = FERRY_TRANSPORT_SOFTIB,
	.switched_fabric = false, /* shared memory: no switch queues */
	.pins_memory = false,     /* reg_mr records the range and pins nothing */
	.ud_max_msg = SIB_MAX_MSG, /* see SIB_MAX_MSG and doc/softib.md */
	.get_device_list = sib_get_device_list,
	.free_device_list = sib_free_device_list,
	.get_device_name = sib_get_device_name,
	.open_device = sib_open_device,
	.close_device = sib_close_device,
	.query_device = sib_query_device,
	.query_port = sib_query_port,
	.query_gid_ex = sib_query_gid_ex,
	.alloc_pd = sib_alloc_pd,
	.dealloc_pd = sib_dealloc_pd,
	.reg_mr = sib_reg_mr,
	.dereg_mr = sib_dereg_mr,
	.create_comp_channel = sib_create_comp_channel,
	.destroy_comp_channel = sib_destroy_comp_channel,
	.create_cq = sib_create_cq,
	.destroy_cq = sib_destroy_cq,
	.get_cq_event = sib_get_cq_event,
	.ack_cq_events = sib_ack_cq_events,
	.create_qp = sib_create_qp,
	.modify_qp = sib_modify_qp,
	.query_qp = sib_query_qp,
	.destroy_qp = sib_destroy_qp,
	.create_ah = sib_create_ah,
	.destroy_ah = sib_destroy_ah,
	.set_rx_area = softib_set_rx_area,
	.qp_rx_area = softib_qp_rx_area,
};
