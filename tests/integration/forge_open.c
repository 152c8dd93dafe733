/*
 * A hostile ferry peer for the trust tests: it reaches a listener's
 * rendezvous as any client does, then sends one stream OPEN claiming the
 * destination and source addresses it is given, and prints the answer:
 * "open 0" (taken), "open ECONNREFUSED", ... An honest ferry never claims
 * what its connect did not name; this one does, to show what a server
 * believes of such claims.
 * usage: forge_open RENDEZVOUS_IP PORT CLAIMED_DST_IP PORT CLAIMED_SRC_IP PORT
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mgmt/mgmt.h"
#include "mgmt/nexus.h"
#include "preload/config.h"
#include "preload/stream.h"
#include "preload/stream_wire.h"
#include "transport/clock.h"
#include "transport/config.h"
#include "transport/rpc.h"

static void addr(const char *ip, const char *port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *in = (void *)ss;
	struct sockaddr_in6 *in6 = (void *)ss;
	if (inet_pton(AF_INET, ip, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)atoi(port));
		*len = sizeof(*in);
	} else if (inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)atoi(port));
		*len = sizeof(*in6);
	} else {
		fprintf(stderr, "forge_open: %s is not an address\n", ip);
		exit(2);
	}
}

static int answer = 1; /* 1: none yet */

static void on_answer(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	(void)rpc;
	(void)tag;
	const struct wire_open_resp *r = resp ? (const void *)resp->buf : NULL;
	if (status == 0 && resp->data_size >= sizeof(*r))
		answer = r->status;
	else
		answer = status ? status : -EPROTO;
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: forge_open RDV_IP PORT DST_IP PORT SRC_IP PORT\n");
		return 2;
	}
	struct sockaddr_storage rdv, dst, src;
	socklen_t rlen, dlen, slen;
	addr(argv[1], argv[2], &rdv, &rlen);
	addr(argv[3], argv[4], &dst, &dlen);
	addr(argv[5], argv[6], &src, &slen);
	struct ferry_config cfg;
	struct preload_config pcfg;
	char msg[256];
	if (preload_config_from_env(&pcfg, &cfg, msg, sizeof(msg))) {
		fprintf(stderr, "forge_open: %s\n", msg);
		return 2;
	}
	int err;
	struct nexus *nx = nexus_create(&cfg, &err, msg, sizeof(msg));
	if (!nx) {
		fprintf(stderr, "forge_open: %s\n", msg);
		return 1;
	}
	struct rpc *rpc = nexus_rpc(nx);
	int session = mgmt_connect(nexus_mgmt(nx), rpc, (struct sockaddr *)&rdv, rlen, 5000);
	if (session < 0) {
		printf("rendezvous %s\n", strerror(-session));
		return 1;
	}
	rpc_lock(rpc);
	struct msgbuf *m = rpc_alloc_msg(rpc, sizeof(struct wire_open));
	struct wire_open *w = (void *)m->buf;
	*w = (struct wire_open){.client_sid = 1, .window = 65536};
	wire_addr_from(&w->dst, (struct sockaddr *)&dst);
	wire_addr_from(&w->src, (struct sockaddr *)&src);
	int rc = rpc_enqueue_request(rpc, session, STREAM_REQ_OPEN, m, on_answer, NULL);
	uint64_t end = clock_now_ns() + 5000000000ull;
	while (rc == 0 && answer == 1 && clock_now_ns() < end)
		rpc_run_once(rpc);
	rpc_unlock(rpc);
	if (rc || answer == 1) {
		printf("open no answer\n");
		return 1;
	}
	printf("open %s\n", answer == 0 ? "0" : answer == -ECONNREFUSED ? "ECONNREFUSED"
									 : strerror(-answer));
	return 0;
}
