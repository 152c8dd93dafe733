/* Registered memory pool: power-of-two classes carved from registered regions. */
#include "autoconfig.h"

#include "transport/pool.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "transport/log.h"
#include "transport/nic.h"

#define POOL_MIN_SHIFT 8  /* 256 B */
#define POOL_MAX_SHIFT 25 /* 32 MiB: an 8 MiB message and its headers fit */
#define POOL_CLASSES (POOL_MAX_SHIFT - POOL_MIN_SHIFT + 1)
#define POOL_REGION (2u << 20) /* one hugepage */
#define POOL_CHUNK_HDR 64u     /* in-band descriptor before each chunk's memory */

_Static_assert(sizeof(struct pool_chunk) <= POOL_CHUNK_HDR, "chunk descriptor fits its header");

struct pool_region {
	uint8_t *base;
	size_t len;
	size_t used;
	struct nic_mr mr;
	struct pool_region *next;
};

struct pool {
	struct nic *nic;
	struct pool_chunk *free[POOL_CLASSES];
	struct pool_region *regions; /* head is the one being carved */
	size_t reserved;
	int hugepages; /* -1 unknown, 0 no, 1 yes */
};

static size_t class_size(unsigned cls) { return (size_t)1 << (cls + POOL_MIN_SHIFT); }

static int size_class(size_t need)
{
	for (unsigned c = 0; c < POOL_CLASSES; c++)
		if (class_size(c) >= need)
			return (int)c;
	return -1;
}

static bool has_cap_ipc_lock(void)
{
	cap_t caps = cap_get_proc();
	if (!caps)
		return false;
	cap_flag_value_t v = CAP_CLEAR;
	cap_get_flag(caps, CAP_IPC_LOCK, CAP_EFFECTIVE, &v);
	cap_free(caps);
	return v == CAP_SET;
}

int pool_check_memlock(size_t already, size_t len, char *msg, size_t msglen)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	if (already + len <= rl.rlim_cur)
		return 0;
	if (has_cap_ipc_lock())
		return 0;
	if (msg && msglen)
		snprintf(msg, msglen,
			 "RLIMIT_MEMLOCK is %llu KiB but ferry needs %zu KiB of locked memory for "
			 "RDMA buffers: raise it (ulimit -l unlimited, or 'memlock' in "
			 "/etc/security/limits.conf, or LimitMEMLOCK= for a systemd unit), or "
			 "grant CAP_IPC_LOCK (setcap cap_ipc_lock+ep PROGRAM)",
			 (unsigned long long)(rl.rlim_cur / 1024), (already + len + 1023) / 1024);
	return -ENOMEM;
}

/* Set once a hugepage region was refused in this process (or in the parent
 * it forked from): a later pool, a fork child's above all, does not ask
 * again, nor say so again (atomic). */
static int pool_hugepages_refused;

static void *map_region(struct pool *p, size_t len)
{
	if (p->hugepages == -1 && __atomic_load_n(&pool_hugepages_refused, __ATOMIC_RELAXED))
		p->hugepages = 0;
	void *m = MAP_FAILED;
	if (len % POOL_REGION == 0 && p->hugepages != 0) {
		m = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (m == MAP_FAILED && p->hugepages == -1) {
			/* Only a pinning nic gains from hugepages (fewer translation
			 * entries); elsewhere the fallback is not worth a warning. */
			enum ferry_log_level lvl = nic_pins_memory(p->nic) ? FERRY_LOG_WARN : FERRY_LOG_INFO;
			ferry_log(lvl, "no hugepages available (%s); using ordinary pages for "
				  "buffers (to enable: sysctl vm.nr_hugepages=N)", strerror(errno));
			p->hugepages = 0;
			__atomic_store_n(&pool_hugepages_refused, 1, __ATOMIC_RELAXED);
		} else if (m != MAP_FAILED) {
			p->hugepages = 1;
		}
	}
	if (m == MAP_FAILED)
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	/* A forked child must not share pages the nic may be reading. */
	madvise(m, len, MADV_DONTFORK);
	return m;
}

static struct pool_region *region_add(struct pool *p, size_t len, char *msg, size_t msglen,
				      int *err)
{
	if (nic_pins_memory(p->nic)) {
		*err = pool_check_memlock(p->reserved, len, msg, msglen);
		if (*err)
			return NULL;
	}
	struct pool_region *r = calloc(1, sizeof(*r));
	if (!r) {
		*err = -ENOMEM;
		return NULL;
	}
	r->base = map_region(p, len);
	if (!r->base) {
		*err = -ENOMEM;
		free(r);
		return NULL;
	}
	r->len = len;
	*err = nic_reg_mem(p->nic, r->base, len, &r->mr);
	if (*err) {
		if (msg && msglen)
			snprintf(msg, msglen, "registering %zu KiB of buffers with the %s nic failed: %s",
				 len / 1024, p->nic->name, strerror(-*err));
		munmap(r->base, len);
		free(r);
		return NULL;
	}
	r->next = p->regions;
	p->regions = r;
	p->reserved += len;
	return r;
}

struct pool *pool_create(struct nic *nic, int *err, char *msg, size_t msglen)
{
	struct pool *p = calloc(1, sizeof(*p));
	if (!p) {
		*err = -ENOMEM;
		return NULL;
	}
	p->nic = nic;
	p->hugepages = -1;
	if (!region_add(p, POOL_REGION, msg, msglen, err)) {
		free(p);
		return NULL;
	}
	*err = 0;
	return p;
}

void pool_destroy(struct pool *p)
{
	if (!p)
		return;
	for (struct pool_region *r = p->regions, *next; r; r = next) {
		next = r->next;
		nic_dereg_mem(p->nic, &r->mr);
		munmap(r->base, r->len);
		free(r);
	}
	free(p);
}

struct pool_chunk *pool_alloc(struct pool *p, size_t size)
{
	int cls = size_class(size + POOL_CHUNK_HDR);
	if (cls < 0) {
		ferry_log_once(FERRY_LOG_ERROR, "buffer of %zu bytes requested: over the pool's largest class",
			       size);
		return NULL;
	}
	struct pool_chunk *c = p->free[cls];
	if (c) {
		p->free[cls] = c->next;
		return c;
	}
	size_t len = class_size((unsigned)cls);
	struct pool_region *r = p->regions;
	if (!r || r->len - r->used < len) {
		char msg[512] = "";
		int err;
		size_t rlen = len > POOL_REGION ? len : POOL_REGION;
		/* The rest of the old region is given to the free lists, largest first. */
		if (r) {
			for (int k = cls - 1; k >= 0; k--) {
				size_t ks = class_size((unsigned)k);
				while (r->len - r->used >= ks) {
					struct pool_chunk *fc = (struct pool_chunk *)(void *)(r->base + r->used);
					fc->addr = r->base + r->used + POOL_CHUNK_HDR;
					fc->lkey = r->mr.lkey;
					fc->size_class = (uint8_t)k;
					fc->next = p->free[k];
					p->free[k] = fc;
					r->used += ks;
				}
			}
		}
		r = region_add(p, rlen, msg, sizeof(msg), &err);
		if (!r) {
			ferry_log_once(FERRY_LOG_ERROR, "out of buffer memory: %s",
				       *msg ? msg : strerror(-err));
			return NULL;
		}
	}
	c = (struct pool_chunk *)(void *)(r->base + r->used);
	c->addr = r->base + r->used + POOL_CHUNK_HDR;
	c->lkey = r->mr.lkey;
	c->size_class = (uint8_t)cls;
	c->next = NULL;
	r->used += len;
	return c;
}

void pool_free(struct pool *p, struct pool_chunk *c)
{
	if (!c)
		return;
	c->next = p->free[c->size_class];
	p->free[c->size_class] = c;
}

size_t pool_reserved_bytes(const struct pool *p) { return p->reserved; }

int pool_uses_hugepages(const struct pool *p) { return p->hugepages == 1; }
