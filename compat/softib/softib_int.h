/*
 * softib internals: the shared-memory layout of a fabric and of each QP's
 * receive ring, and the private objects behind the public ibv_* structs.
 *
 * A fabric is a 0700 directory /dev/shm/ferry-softib-<uid> holding, per
 * fabric name F: F.fabric (the QP directory), F.qp.<qpn> (one receive ring
 * per QP, created by its owner) and ch.<pid>.<n> (completion channel
 * sockets). Files are 0600. Everything in them is written by processes of
 * one user, but a reader still bounds every length it takes from them.
 *
 * Delivery is synchronous: ibv_post_send copies the packet into the target
 * QP's ring (the "wire"), and the receiver's ibv_poll_cq copies it into the
 * posted receive buffer behind a GRH (the "DMA") -- or, for a receive in the
 * QP's area (softib_set_rx_area), the sender writes it there directly. A sender may only fill a
 * ring slot against a credit, and the receiver grants one credit per posted
 * receive, so a packet for a QP with no posted receive is dropped, as on a
 * real NIC, and the ring can never overflow.
 */
#ifndef FERRY_SOFTIB_INT_H
#define FERRY_SOFTIB_INT_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uthash.h>

#define SIB_MAGIC_FABRIC 0x666572727966616bull /* "ferryfak" */
#define SIB_MAGIC_QP 0x6665727279717034ull /* "ferryqp4": ring layout 4 */
#define SIB_VERSION 2u
#define SIB_MAX_QPS 1024u /* directory slots; QPN = gen << 10 | slot */
#define SIB_QPN_SLOT_BITS 10u
#define SIB_MTU 4096u /* the port's active MTU, as hardware reports it */
/* What one UD send may carry: more than the MTU, softib's departure from
 * hardware (doc/softib.md), told through the port's max_msg_sz. */
#define SIB_MAX_MSG 65536u
#define SIB_GRH 40u
#define SIB_SLOT_HDR 64u
#define SIB_SLOT_SIZE (SIB_SLOT_HDR + SIB_MAX_MSG)
#define SIB_RING_OFFSET 4096u
#define SIB_MAX_QP_WR 4096
#define SIB_MAX_SGE 4
#define SIB_MAX_INLINE 512u
#define SIB_MAX_CQE 65536
#define SIB_MAX_MR 4096u /* power of two: an lkey's bits 8..19 are the slot */
#define SIB_KEY_TAG_SHIFT 20u
#define SIB_KEY_TAG_MASK 0xfffu
#define SIB_GID_TBL 4
#define SIB_PATH_MAX 108
/* Empty polls of a CQ in a row before it yields the CPU (tens of us). */
#define SIB_YIELD_AFTER 256u

struct sib_dir_entry {
	uint32_t qpn;
	uint32_t live;
	int32_t pid;
	uint32_t pad;
	uint64_t start_time; /* /proc/<pid>/stat starttime: guards against pid reuse */
	uint64_t pidns;      /* pid namespace inode: other namespaces' pids mean nothing here */
};
_Static_assert(sizeof(struct sib_dir_entry) == 32, "shared layout");

struct sib_fabric_shm {
	uint64_t magic; /* stored last, with release, by the creator */
	uint32_t version;
	uint32_t max_qps;
	pthread_mutex_t lock; /* robust, process-shared: the directory */
	uint32_t next_gen;
	uint32_t next_ctx; /* contexts opened on the fabric: each gets its own lkey tag */
	uint8_t gid[SIB_GID_TBL][16];
	struct sib_dir_entry dir[SIB_MAX_QPS];
};

/* Header of one packet in a ring slot. */
struct sib_slot {
	uint32_t len;
	uint32_t src_qpn;
	uint8_t sgid[16];
	uint8_t dgid[16];
	uint8_t pad[SIB_SLOT_HDR - 40];
	uint8_t data[];
};

/*
 * One posted receive as senders see it, indexed by its sequence number
 * (the value of granted when it was posted): packet number t lands in
 * receive number t, since both sides count in order. The receiver writes
 * off (the buffer's offset in the ring file when it lies in the area, else
 * 0) and len (its room). A sender that writes the packet there itself
 * turns the entry into the completion: len becomes the packet's length
 * with SIB_RXQ_DIRECT, src_qpn the sender's QP; otherwise it clears len
 * and the packet waits in its slot. Four entries share a cache line, so a
 * burst of small packets costs neither side a slot header each.
 */
struct sib_rxq_ent {
	uint64_t off;
	uint32_t len;
	uint32_t src_qpn;
};
#define SIB_RXQ_DIRECT 0x80000000u
_Static_assert(sizeof(struct sib_slot) == SIB_SLOT_HDR, "shared layout");

/*
 * A QP's ring header. Lines are split by who writes them: the lock and the
 * senders' view of the receiver stay in the sending process's cache, so a
 * packet costs the sender the slot and the tail and the receiver the same
 * lines back; the receiver's head and granted are read again only when the
 * senders' view of them says there is no room. Receives are granted as a
 * running count that only the owner writes: available = granted - tail.
 */
struct sib_qp_shm {
	/* Read-mostly: written at creation, by modify_qp and at death. */
	uint64_t magic;
	uint32_t qpn;
	uint32_t nslots; /* power of two */
	uint32_t qkey;     /* under lock */
	uint32_t rx_ready; /* state is RTR, RTS, SQD or SQE */
	uint32_t dead;     /* destroyed or reclaimed: drop cached mappings */
	uint32_t leased;   /* the owner holds a lease on this file (see softib_fabric.c) */
	uint64_t rxq_off;  /* nslots struct sib_rxq_ent */
	uint64_t area_off, area_len; /* receive buffers senders write directly */
	uint64_t wake_cookie;
	char wake_path[SIB_PATH_MAX];
	/* Senders only, under lock. */
	pthread_mutex_t lock __attribute__((aligned(64))); /* robust, process-shared */
	uint64_t snd_granted; /* senders' last look at granted */
	uint64_t snd_head;    /* ... and at head */
	uint64_t rx_pkts __attribute__((aligned(64)));
	uint64_t drop_no_recv, drop_qkey, drop_state, rx_direct;
	/* Written by senders under lock, read by the receiver: the doorbell. */
	uint64_t tail __attribute__((aligned(64))); /* packets placed */
	/* The receiver (the owner). */
	uint64_t head __attribute__((aligned(64))); /* packets taken */
	uint64_t granted;                           /* receives ever posted (reset: = tail) */
	uint32_t armed __attribute__((aligned(64))); /* receiver's CQ wants an event */
};
_Static_assert(sizeof(struct sib_qp_shm) <= SIB_RING_OFFSET, "header fits before the ring");

/* A fabric as one process maps it. */
struct sib_fabric {
	char name[128];
	char dir[64];
	int fd;
	struct sib_fabric_shm *shm;
};

/* A peer's ring as this process maps it (cached per context). */
struct sib_peer_map {
	uint32_t qpn;
	uint32_t nslots; /* as checked against len when mapped */
	struct sib_qp_shm *shm;
	size_t len;
	UT_hash_handle hh;
	struct sib_peer_map *next_dead;
};

struct sib_device {
	struct ibv_device dev;
	char fabric[128];
};

struct sib_mr {
	struct ibv_mr mr;
	int access;
};

struct sib_context {
	struct ibv_context ctx;
	struct sib_fabric fab;
	int wake_sock; /* unbound datagram socket for waking peers */
	pthread_mutex_t lock; /* MR table and peer map: registration may race the datapath */
	struct sib_mr *mrs[SIB_MAX_MR];
	uint32_t mr_seq;
	uint32_t key_tag; /* top bits of every lkey of this context (softib_device.c) */
	size_t next_area; /* area of the next QP created (softib_set_rx_area) */
	struct sib_peer_map *peers;
	/* Rings found dead stay mapped until close: a QP's one-entry cache
	 * (sib_qp.last_ring) may still point into them. */
	struct sib_peer_map *dead_maps;
};

struct sib_pd {
	struct ibv_pd pd;
	unsigned refs;
};

struct sib_ah {
	struct ibv_ah ah;
	struct ibv_ah_attr attr;
};

struct sib_cqe {
	struct ibv_wc wc;
	struct sib_qp *qp; /* send completions: the QP whose send queue it retires */
	uint64_t sq_pos;
};

struct sib_channel {
	struct ibv_comp_channel ch;
	char path[SIB_PATH_MAX];
	struct sib_cq *cqs; /* CQs using this channel */
};

struct sib_cq {
	struct ibv_cq cq;
	struct sib_cqe *ring;
	uint32_t cap, head, tail; /* local completions (sends, errors, flushes) */
	bool overrun;
	bool armed;      /* req_notify_cq called, no event delivered since */
	bool self_woken; /* a local completion already signalled this arm */
	struct sib_qp **rqps; /* QPs receiving into this CQ: polled for packets */
	unsigned n_rqps, rr;
	struct sib_cq *next_on_channel;
	unsigned events, acked;
	unsigned empty_polls; /* in a row: see sib_poll_cq */
};

struct sib_rwqe {
	uint64_t wr_id;
	bool direct; /* in the area: senders write it themselves */
	int num_sge;
	struct ibv_sge sge[SIB_MAX_SGE];
};

struct sib_qp {
	struct ibv_qp qp;
	struct ibv_qp_cap cap;
	enum ibv_qp_state state;
	uint32_t qkey;
	uint8_t port;
	uint16_t pkey_index;
	uint32_t sq_psn;
	struct sib_qp_shm *shm;
	size_t shm_len;
	/* The ring's shape as this owner laid it out: what the header says
	 * may have been rewritten by any process of the user. */
	uint32_t nslots;
	struct sib_rxq_ent *rxq;
	uint64_t drop_malformed; /* ring entries that could not be true, dropped */
	uint8_t *area; /* in shm; NULL if none */
	size_t area_len;
	char shm_path[256];
	int ring_fd; /* holds the ring's lease: the owner is alive */
	/* Posted receives, oldest at rq_head. */
	struct sib_rwqe *rq;
	uint32_t rq_cap, rq_head, rq_count;
	/* Send queue slots: a WR holds one until a later polled signalled
	 * completion (or an error completion) retires it. */
	uint64_t sq_posted, sq_retired;
	/* The ring this QP sent to last, to skip the map lookup. */
	uint32_t last_qpn;
	struct sib_qp_shm *last_ring;
	size_t last_ring_len;
	uint32_t last_ring_nslots;
};

static inline struct sib_context *sib_ctx(struct ibv_context *c)
{
	return (struct sib_context *)c;
}

/* softib_fabric.c */
int sib_fabric_open(struct sib_fabric *fab, const char *name);
void sib_fabric_close(struct sib_fabric *fab);
int sib_fabric_remove(const char *name);
int sib_dir_path(char *buf, size_t cap);
/* This process's pid namespace (inode of /proc/self/ns/pid). */
uint64_t sib_pidns(void);
void sib_shm_lock(pthread_mutex_t *m);
void sib_shm_unlock(pthread_mutex_t *m);
int sib_shm_lock_init(pthread_mutex_t *m);
/* Bytes of a ring of nslots slots with an area of area bytes. */
size_t sib_ring_len(uint32_t nslots, size_t area);
/* Lays out a new ring in m (sib_ring_len bytes, zeroed) for its owner qp,
 * whose qp_num is set, and points qp at it. */
void sib_ring_init(struct sib_qp *qp, void *m, uint32_t nslots, size_t area);
/* Creates the ring of a new QP; returns 0 or errno. */
int sib_fabric_qp_create(struct sib_context *c, struct sib_qp *qp, uint32_t nslots);
void sib_fabric_qp_destroy(struct sib_context *c, struct sib_qp *qp);
unsigned sib_fabric_reclaim(struct sib_fabric *fab);
bool sib_fabric_qp_live(struct sib_fabric *fab, uint32_t qpn);
/* A sender's hold on one destination ring across a post list: packets to
 * the same QP in a row take its lock and check for a wake-up once. */
struct sib_wire {
	struct sib_qp_shm *q; /* locked, or NULL */
	size_t len;           /* of its mapping: bounds what the ring says */
	uint32_t nslots;      /* checked against len when mapped: the ring's may change */
	uint32_t qpn;
	bool woke; /* the receiver was checked for sleep since the lock was taken */
};
/* Copies a packet gathered from sge[] into dst_qpn's ring, or drops it. */
void sib_wire_put(struct sib_context *c, struct sib_qp *src, struct sib_wire *w,
		  uint32_t dst_qpn, uint32_t qkey, const uint8_t *sgid, const uint8_t *dgid,
		  const struct ibv_sge *sge, int num_sge, uint32_t len);
/* Unlocks the ring held and wakes its receiver if it is armed. */
void sib_wire_release(struct sib_context *c, struct sib_wire *w);
void sib_peer_maps_free(struct sib_context *c);

/* softib_device.c */
struct sib_mr *sib_mr_find(struct sib_context *c, uint32_t lkey);
bool sib_gid_is_ours(const struct sib_fabric *fab, const uint8_t *gid);
void sib_pd_ref(struct ibv_pd *pd, int delta);

/* softib_cq.c */
int sib_cq_push(struct sib_cq *cq, const struct ibv_wc *wc, struct sib_qp *qp, uint64_t sq_pos);
void sib_cq_attach_rqp(struct sib_cq *cq, struct sib_qp *qp);
void sib_cq_detach_rqp(struct sib_cq *cq, struct sib_qp *qp);
struct ibv_comp_channel *sib_create_comp_channel(struct ibv_context *ctx);
int sib_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *sib_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *ch, int vec);
int sib_destroy_cq(struct ibv_cq *cq);
int sib_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
void sib_ack_cq_events(struct ibv_cq *cq, unsigned int n);
int sib_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int sib_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* softib_qp.c */
struct ibv_qp *sib_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int sib_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int sib_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
		 struct ibv_qp_init_attr *init);
int sib_destroy_qp(struct ibv_qp *qp);
int sib_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sib_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* Writes the IPv6-format GRH a RoCE v2 / IB NIC puts in front of a packet. */
void sib_build_grh(uint8_t *grh, uint32_t len, const uint8_t *sgid, const uint8_t *dgid);
/* Moves up to max packets from qp's ring into its posted receives. */
int sib_qp_poll_recv(struct sib_qp *qp, struct ibv_wc *wc, int max);

#endif
