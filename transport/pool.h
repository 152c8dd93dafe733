/*
 * The registered memory pool behind msgbufs: power-of-two size classes
 * carved from large regions that are registered with the nic once.
 * Hugepages when the system has them (one warning otherwise), regions
 * MADV_DONTFORK so a forked child never shares DMA targets, and
 * RLIMIT_MEMLOCK / CAP_IPC_LOCK checked before a pinning nic registers.
 * Not thread-safe: the owning rpc endpoint's lock covers it.
 */
#ifndef FERRY_POOL_H
#define FERRY_POOL_H

#include <stddef.h>
#include <stdint.h>

struct nic;
struct ferry_stats;

struct pool_chunk {
	uint8_t *addr;
	uint32_t lkey;
	uint8_t size_class;
	struct pool_chunk *next; /* free list link while free */
};

struct pool;

/* Returns NULL with *err = -errno and a message in msg (what to change). */
struct pool *pool_create(struct nic *nic, int *err, char *msg, size_t msglen);
void pool_destroy(struct pool *pool);

/* A chunk of at least size bytes, or NULL (-ENOMEM, or size over the
 * largest class; the reason goes to the log once). */
struct pool_chunk *pool_alloc(struct pool *pool, size_t size);
void pool_free(struct pool *pool, struct pool_chunk *chunk);

/* Bytes reserved from the system and registered so far. */
size_t pool_reserved_bytes(const struct pool *pool);
/* Whether the regions are on hugepages. */
int pool_uses_hugepages(const struct pool *pool);

/*
 * Checks that locking another len bytes fits RLIMIT_MEMLOCK or that the
 * process has CAP_IPC_LOCK. Returns 0, or -ENOMEM with a message saying the
 * limit, the need and what to run (ulimit -l, limits.conf, setcap).
 */
int pool_check_memlock(size_t already_locked, size_t len, char *msg, size_t msglen);

#endif
