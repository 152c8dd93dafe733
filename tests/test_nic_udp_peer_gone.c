/* A peer whose port has gone, seen through its connected socket: counted,
 * not warned about (the peer's death is mgmt's to report), and it does not
 * use up the one warning a real send failure gets. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/config.h"
#include "transport/log.h"
#include "transport/nic.h"
#include "transport/nic_udp.h"
#include "transport/stats.h"

static const struct sockaddr_in loopback4 = {
	.sin_family = AF_INET, .sin_port = 9, .sin_addr.s_addr = 0x0100007f /* 127.0.0.1 */};

static struct nic *open_nic(const struct ferry_config *cfg, struct ferry_stats *st)
{
	char msg[256] = "";
	int err = 0;
	struct nic *n = nic_udp_open(cfg, st, &err, msg, sizeof(msg));
	cr_assert_not_null(n, "nic_udp_open: %d %s", err, msg);
	return n;
}

static struct nic_peer *peer_to(struct nic *from, struct nic *to)
{
	struct nic_route r;
	nic_local_route(to, &r);
	nic_route_fixup(from, &r, (const struct sockaddr *)&loopback4, sizeof(loopback4));
	struct nic_peer *p;
	cr_assert_eq(nic_peer_create(from, &r, &p), 0);
	return p;
}

static char log_path[64];

static void log_to_file(void)
{
	snprintf(log_path, sizeof(log_path), "/tmp/ferry-peer-gone.%d", (int)getpid());
	ferry_log_init(FERRY_LOG_WARN, log_path);
}

static bool log_has(const char *what)
{
	FILE *f = fopen(log_path, "r");
	if (!f)
		return false;
	char line[512];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

static void log_done(void)
{
	ferry_log_init(FERRY_LOG_WARN, NULL);
	unlink(log_path);
}

Test(nic_udp_peer_gone, refusals_are_counted_quietly, .timeout = 30)
{
	log_to_file();
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	struct ferry_stats sa = {0}, sc = {0};
	struct nic *a = open_nic(&cfg, &sa);
	struct nic *c = open_nic(&cfg, &sc);
	struct nic_peer *to_c = peer_to(a, c);
	nic_close(c);

	uint8_t buf[24];
	memset(buf, 5, sizeof(buf));
	struct nic_tx tx = {.peer = to_c, .nsge = 1, .sge = {{.addr = buf, .len = sizeof(buf)}}};
	/* The first datagram draws the ICMP answer, a later send reports it. */
	for (int i = 0; i < 100 && nic_udp_tx_failures(a) == 0; i++) {
		cr_assert_eq(nic_tx_burst(a, &tx, 1), 1);
	}
	cr_assert_geq(nic_udp_tx_failures(a), 1, "the refusal is counted");
	cr_assert_not(log_has("Connection refused"), "a dead peer is no send failure");

	/* A real failure, to a live peer, still gets its warning. */
	struct nic *b = open_nic(&cfg, &sc);
	struct nic_peer *to_b = peer_to(a, b);
	static uint8_t big[65508];
	/* One byte over the IPv4 UDP limit: the kernel says EMSGSIZE. */
	struct nic_tx over = {.peer = to_b, .nsge = 1, .sge = {{.addr = big, .len = sizeof(big)}}};
	uint64_t before = nic_udp_tx_failures(a);
	cr_assert_eq(nic_tx_burst(a, &over, 1), 1);
	cr_assert_eq(nic_udp_tx_failures(a), before + 1);
	cr_assert(log_has("Message too long"), "the first real failure is warned about");

	nic_peer_destroy(a, to_b);
	nic_peer_destroy(a, to_c);
	nic_close(b);
	nic_close(a);
	log_done();
}
