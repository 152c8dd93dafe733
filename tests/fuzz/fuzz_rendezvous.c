/*
 * libFuzzer target: the rendezvous exchange as the management thread reads
 * it (mgmt_on_datagram, mgmt/mgmt_session.c): requests on a listener's
 * rendezvous socket, and on the control socket, answered by a real endpoint
 * on the udp datapath, whose nic takes the route a request carries; and the
 * answers a connecting client reads. Anyone who can reach a listener's UDP
 * port writes these bytes.
 *
 * Input: records of [flags][length][datagram]. Flags:
 *   1  arrives on the control socket, not the listener's
 *   2  from [::1], not 127.0.0.1
 *   4  a client connect is under way first (its request goes nowhere)
 *   8  the datagram's token (bytes 8..15) is that connect's, as an
 *      eavesdropper who saw the request would write it
 *  16  the timers run after it, a second later (retries, heartbeats)
 * Between inputs every session and connect is let go, so each input starts
 * from a fresh management state against the same endpoint.
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mgmt/mgmt_internal.h"
#include "transport/log.h"
#include "transport/nic.h"
#include "transport/rpc.h"
#include "transport/stats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ferry_config cfg;
static struct ferry_stats stats;
static struct rpc *rpc;
static struct mgmt m;
static struct listener lis;
static struct mgmt_addr self; /* the control socket: every answer comes back here */

static void setup(void)
{
	ferry_config_defaults(&cfg);
	ferry_log_init(FERRY_LOG_ERROR, NULL);
	char why[256];
	int err;
	struct nic *nic = nic_udp_open(&cfg, &stats, &err, why, sizeof(why));
	if (nic)
		rpc = rpc_create(nic, &cfg, &stats, &err, why, sizeof(why));
	/* Loopback only: what the target sends lands in its own socket. */
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	mgmt_addr_set(&self, (struct sockaddr *)&lo, sizeof(lo));
	int fd = mgmt_net_socket(AF_INET, &self, MGMT_NET_RECVERR);
	socklen_t len = sizeof(self.ss);
	if (!rpc || fd < 0 || getsockname(fd, (struct sockaddr *)&self.ss, &len) < 0)
		abort();
	m.cfg = &cfg;
	m.stats = &stats;
	m.uuid = 0x5EED;
	m.ctl4 = fd;
	m.ctl6 = m.evfd = -1;
	m.ctl_rpc = rpc;
	m.queue_tail = &m.queue;
	m.completions_tail = &m.completions;
	lis.fd = fd;
	lis.rpc = rpc;
	lis.asked = lis.bound = self;
}

static void connect_done(void *ctx, int result)
{
}

static void start_connect(uint64_t now)
{
	struct waiter *w = calloc(1, sizeof(*w));
	if (!w)
		abort();
	w->fn = connect_done;
	w->sync = true; /* completed at once, freed by mgmt_waiter_done */
	mgmt_connect_start(&m, rpc, &self, false, w, now);
}

static void drain(int fd)
{
	uint8_t buf[256];
	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0)
		;
	struct mgmt_addr dest;
	int err;
	while (mgmt_net_read_error(fd, &dest, &err) > 0)
		;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!rpc)
		setup();
	uint64_t now = 1000ull * MGMT_MS;
	struct sockaddr_in src4 = {.sin_family = AF_INET, .sin_port = htons(mgmt_addr_port(&self)),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_in6 src6 = {.sin6_family = AF_INET6, .sin6_port = src4.sin_port,
				    .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	while (size >= 2) {
		uint8_t flags = data[0];
		size_t len = data[1] < size - 2 ? data[1] : size - 2;
		uint8_t dgram[256];
		memcpy(dgram, data + 2, len);
		data += 2 + len;
		size -= 2 + len;
		if ((flags & 4) && !m.pendings)
			start_connect(now);
		if ((flags & 8) && m.pendings && len >= 16)
			memcpy(dgram + 8, &m.pendings->token, 8); /* host order is the wire's */
		const struct sockaddr *src = (flags & 2) ? (const struct sockaddr *)&src6
							 : (const struct sockaddr *)&src4;
		socklen_t srclen = (flags & 2) ? sizeof(src6) : sizeof(src4);
		mgmt_on_datagram(&m, lis.fd, (flags & 1) ? NULL : &lis, dgram, len, src, srclen, now);
		if (flags & 16) {
			now += 1000ull * MGMT_MS;
			mgmt_timers(&m, now);
		}
	}
	mgmt_sess_forget(&m, rpc, now);
	mgmt_sess_shutdown(&m);
	drain(lis.fd);
	return 0;
}
