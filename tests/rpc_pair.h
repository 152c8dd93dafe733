/* Two connected rpc endpoints in one test process, over a chosen datapath. */
#ifndef FERRY_TEST_RPC_PAIR_H
#define FERRY_TEST_RPC_PAIR_H

#include <stdbool.h>

#include "transport/config.h"
#include "transport/rpc.h"
#include "transport/stats.h"

struct nic_test_fabric;

struct rpc_pair {
	struct ferry_config cfg_a, cfg_b;
	struct ferry_stats st_a, st_b;
	struct nic_test_fabric *fabric;
	struct rpc *a, *b; /* a sends requests to b on session sa; b's side is sb */
	int sa, sb;
};

/* The datapaths the parametrised suites run on. */
extern const char *const rpc_pair_transports[];
extern const unsigned rpc_pair_n_transports;

/*
 * Opens endpoints a and b on transport ("test", "udp" or "softib") with
 * base's settings, and joins them with one session. Returns 0, or -errno
 * with the reason in why (a datapath that cannot run on this host is
 * -ENODEV, for the test to skip).
 */
int rpc_pair_open(struct rpc_pair *p, const char *transport, const struct ferry_config *base,
		  char *why, size_t whylen);
void rpc_pair_close(struct rpc_pair *p);

/* Runs both event loops until done(ctx) or max_seconds pass (a hang
 * guard, not a measurement). Returns whether done(ctx) became true. */
bool rpc_pair_run_until(struct rpc_pair *p, bool (*done)(void *ctx), void *ctx,
			unsigned max_seconds);

#endif
