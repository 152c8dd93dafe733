/*
 * A process's ferry state: config, counters, the datapath endpoint and the
 * management thread, created together. Sessions to FERRY_PEERS are started
 * (asynchronously) at creation.
 */
#ifndef FERRY_NEXUS_H
#define FERRY_NEXUS_H

#include <stddef.h>

#include "transport/config.h"
#include "transport/stats.h"

struct rpc;
struct mgmt;
struct nexus;

/* cfg is copied. NULL with *err and a message (what to change) in msg. */
struct nexus *nexus_create(const struct ferry_config *cfg, int *err, char *msg, size_t msglen);
/* The same, counting into stats (which must outlive the nexus) instead of
 * counters of its own: the interposer's live in shared memory, where
 * ferry-stat reads them (NULL: its own). */
struct nexus *nexus_create_counting(const struct ferry_config *cfg, struct ferry_stats *stats,
				    int *err, char *msg, size_t msglen);
void nexus_destroy(struct nexus *nx);

struct rpc *nexus_rpc(struct nexus *nx);
struct mgmt *nexus_mgmt(struct nexus *nx);
struct ferry_stats *nexus_stats(struct nexus *nx);
const struct ferry_config *nexus_config(const struct nexus *nx);
/* The datapath actually in use ("udp", "softib", ...). */
const char *nexus_transport(const struct nexus *nx);

#endif
