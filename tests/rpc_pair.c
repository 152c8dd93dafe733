/* Two connected rpc endpoints in one test process. */
#include "autoconfig.h"

#include "tests/rpc_pair.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "transport/clock.h"
#ifdef HAVE_VERBS
#include "compat/softib/softib.h"
#endif
#include "transport/nic_test.h"

#ifdef HAVE_VERBS
const char *const rpc_pair_transports[] = {"test", "udp", "softib"};
#else
const char *const rpc_pair_transports[] = {"test", "udp"};
#endif
const unsigned rpc_pair_n_transports = sizeof(rpc_pair_transports) / sizeof(rpc_pair_transports[0]);

static struct nic *open_nic(struct rpc_pair *p, const char *transport, struct ferry_config *cfg,
			    struct ferry_stats *st, char *why, size_t whylen, int *err)
{
	if (!strcmp(transport, "test")) {
		struct nic *n = nic_test_open(p->fabric, 4096, 1024, st);
		*err = n ? 0 : -ENOMEM;
		return n;
	}
	if (!strcmp(transport, "udp"))
		return nic_udp_open(cfg, st, err, why, whylen);
	snprintf(cfg->softib_fabric, sizeof(cfg->softib_fabric), "ferry-test-%d", (int)getpid());
	struct nic *n = nic_verbs_open_softib(cfg, st, err, why, whylen);
	if (!n && *err != -ENOMEM)
		*err = -ENODEV;
	return n;
}

/* Both ends are this process: each session's handshake "came from" the
 * loopback address, as mgmt would record it. */
static bool set_origin(struct rpc_pair *p)
{
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	rpc_session_set_origin(p->a, p->sa, (struct sockaddr *)&lo, sizeof(lo));
	rpc_session_set_origin(p->b, p->sb, (struct sockaddr *)&lo, sizeof(lo));
	return true;
}

static void fixup_loopback(struct nic *nic, struct nic_route *r)
{
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	nic_route_fixup(nic, r, (struct sockaddr *)&lo, sizeof(lo));
}

int rpc_pair_open(struct rpc_pair *p, const char *transport, const struct ferry_config *base,
		  char *why, size_t whylen)
{
	int err;
	memset(p, 0, sizeof(*p));
	p->cfg_a = p->cfg_b = *base;
	p->cfg_b.fault.seed = base->fault.seed * 7919u + 1u; /* independent fates */
	if (!strcmp(transport, "test") && !(p->fabric = nic_test_fabric_create()))
		return -ENOMEM;
	struct nic *na = open_nic(p, transport, &p->cfg_a, &p->st_a, why, whylen, &err);
	if (!na)
		return err;
	struct nic *nb = open_nic(p, transport, &p->cfg_b, &p->st_b, why, whylen, &err);
	if (!nb) {
		nic_close(na);
		return err;
	}
	p->a = rpc_create(na, &p->cfg_a, &p->st_a, &err, why, whylen);
	if (!p->a) {
		nic_close(nb);
		return err;
	}
	p->b = rpc_create(nb, &p->cfg_b, &p->st_b, &err, why, whylen);
	if (!p->b) {
		rpc_destroy(p->a);
		return err;
	}
	uint64_t token = 0x5EED0000ull ^ (uint64_t)getpid();
	p->sa = rpc_session_create(p->a, token);
	p->sb = rpc_session_create(p->b, token);
	struct nic_route ra, rb;
	rpc_local_route(p->a, &ra);
	rpc_local_route(p->b, &rb);
	fixup_loopback(rpc_nic(p->a), &rb);
	fixup_loopback(rpc_nic(p->b), &ra);
	uint32_t dpp = rpc_max_pkt_data(p->a) < rpc_max_pkt_data(p->b) ? rpc_max_pkt_data(p->a)
									 : rpc_max_pkt_data(p->b);
	if (p->sa < 0 || p->sb < 0 ||
	    !set_origin(p) ||
	    (err = rpc_session_connect(p->a, p->sa, &rb, (uint16_t)p->sb, dpp)) != 0 ||
	    (err = rpc_session_connect(p->b, p->sb, &ra, (uint16_t)p->sa, dpp)) != 0) {
		snprintf(why, whylen, "session setup failed");
		rpc_pair_close(p);
		return err ? err : -EINVAL;
	}
	return 0;
}

void rpc_pair_close(struct rpc_pair *p)
{
	bool softib = p->a && !strcmp(rpc_nic(p->a)->name, "softib");
	rpc_destroy(p->a);
	rpc_destroy(p->b);
#ifdef HAVE_VERBS
	if (softib)
		softib_fabric_remove(p->cfg_a.softib_fabric); /* per-test fabrics must not pile up */
#else
	(void)softib;
#endif
	if (p->fabric)
		nic_test_fabric_destroy(p->fabric);
	memset(p, 0, sizeof(*p));
}

bool rpc_pair_run_until(struct rpc_pair *p, bool (*done)(void *ctx), void *ctx,
			unsigned max_seconds)
{
	uint64_t end = clock_now_ns() + (uint64_t)max_seconds * 1000000000ull;
	while (!done(ctx)) {
		rpc_run_once(p->a);
		rpc_run_once(p->b);
		if (clock_now_ns() > end)
			return false;
	}
	return true;
}
