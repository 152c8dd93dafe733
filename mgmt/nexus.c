/* A process's ferry state, built bottom-up and torn down top-down. */
#include "autoconfig.h"

#include "mgmt/nexus.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgmt/mgmt.h"
#include "transport/log.h"
#include "transport/nic.h"
#include "transport/rpc.h"

struct nexus {
	struct ferry_config cfg;
	struct ferry_stats own_stats;
	struct ferry_stats *stats; /* own_stats, or the caller's */
	struct rpc *rpc;
	struct mgmt *mgmt;
	char transport[16];
};

static void peer_connected(void *ctx, int session_or_err)
{
	const char *peer = ctx;
	if (session_or_err < 0)
		log_info("FERRY_PEERS: %s not connected in advance: %s", peer,
			 strerror(-session_or_err));
	else
		log_debug("FERRY_PEERS: %s connected (session %d)", peer, session_or_err);
	free(ctx);
}

/* One "host:port" or "[v6]:port" of FERRY_PEERS; a bad entry is logged and
 * skipped, since pre-connecting is an optimisation. */
static void peer_start(struct nexus *nx, const char *entry)
{
	char host[256];
	const char *port;
	if (entry[0] == '[') {
		const char *close = strchr(entry, ']');
		if (!close || close[1] != ':' || (size_t)(close - entry - 1) >= sizeof(host))
			goto bad;
		memcpy(host, entry + 1, (size_t)(close - entry - 1));
		host[close - entry - 1] = '\0';
		port = close + 2;
	} else {
		const char *colon = strrchr(entry, ':');
		if (!colon || (size_t)(colon - entry) >= sizeof(host))
			goto bad;
		memcpy(host, entry, (size_t)(colon - entry));
		host[colon - entry] = '\0';
		port = colon + 1;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM,
				 .ai_flags = AI_NUMERICSERV}, *res = NULL;
	int gai = getaddrinfo(host, port, &hints, &res);
	if (gai != 0) {
		log_warn("FERRY_PEERS: %s: %s; skipped", entry, gai_strerror(gai));
		return;
	}
	char *ctx = strdup(entry);
	int rc = ctx ? mgmt_connect_async(nx->mgmt, nx->rpc, res->ai_addr, res->ai_addrlen,
					  nx->cfg.connect_timeout_ms, peer_connected, ctx)
		     : -ENOMEM;
	freeaddrinfo(res);
	if (rc < 0) {
		free(ctx);
		log_warn("FERRY_PEERS: %s: %s; skipped", entry, strerror(-rc));
	}
	return;
bad:
	log_warn("FERRY_PEERS: '%s' is not host:port or [v6-address]:port; skipped", entry);
}

static void peers_start(struct nexus *nx)
{
	char list[sizeof(nx->cfg.peers)];
	memcpy(list, nx->cfg.peers, sizeof(list));
	list[sizeof(list) - 1] = '\0';
	char *save = NULL;
	for (char *e = strtok_r(list, ", ", &save); e; e = strtok_r(NULL, ", ", &save))
		peer_start(nx, e);
}

struct nexus *nexus_create(const struct ferry_config *cfg, int *err, char *msg, size_t msglen)
{
	return nexus_create_counting(cfg, NULL, err, msg, msglen);
}

struct nexus *nexus_create_counting(const struct ferry_config *cfg, struct ferry_stats *stats,
				    int *err, char *msg, size_t msglen)
{
	struct nexus *nx = calloc(1, sizeof(*nx));
	if (!nx) {
		*err = -ENOMEM;
		snprintf(msg, msglen, "ferry: out of memory");
		return NULL;
	}
	nx->cfg = *cfg;
	nx->stats = stats ? stats : &nx->own_stats;
	ferry_log_init(nx->cfg.log_level, nx->cfg.log_file);
	struct nic *nic = nic_open(&nx->cfg, nx->stats, err, msg, msglen);
	if (!nic)
		goto fail;
	snprintf(nx->transport, sizeof(nx->transport), "%s", nic->name);
	/* rpc_create owns the nic from here, on failure too. */
	nx->rpc = rpc_create(nic, &nx->cfg, nx->stats, err, msg, msglen);
	if (!nx->rpc)
		goto fail;
	nx->mgmt = mgmt_create(&nx->cfg, nx->stats, err, msg, msglen);
	if (!nx->mgmt)
		goto fail;
	if (nx->cfg.peers[0])
		peers_start(nx);
	return nx;
fail:
	nexus_destroy(nx);
	return NULL;
}

void nexus_destroy(struct nexus *nx)
{
	if (!nx)
		return;
	/* The management thread goes first: it calls into the endpoint. */
	mgmt_destroy(nx->mgmt);
	if (nx->rpc)
		rpc_destroy(nx->rpc);
	free(nx);
}

struct rpc *nexus_rpc(struct nexus *nx)
{
	return nx->rpc;
}

struct mgmt *nexus_mgmt(struct nexus *nx)
{
	return nx->mgmt;
}

struct ferry_stats *nexus_stats(struct nexus *nx)
{
	return nx->stats;
}

const struct ferry_config *nexus_config(const struct nexus *nx)
{
	return &nx->cfg;
}

const char *nexus_transport(const struct nexus *nx)
{
	return nx->transport;
}
