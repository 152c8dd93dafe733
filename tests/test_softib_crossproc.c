/* nic_ib on softib between two processes: 1,000,000 packets, none corrupted. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/softib_fixture.h"
#include "transport/config.h"
#include "transport/nic.h"

#define PACKETS 1000000u
#define WINDOW 512u  /* in flight; under the receiver's 1024 buffers */
#define ACK_EVERY 64u
#define SLOT 2048u
#define PATTERN 8192u

struct wire {
	uint32_t seq;
	uint32_t len;
};

static uint8_t pattern[PATTERN + SLOT];

static void make_pattern(void)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < sizeof(pattern); i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		pattern[i] = (uint8_t)x;
	}
}

static uint32_t len_of(uint32_t seq)
{
	return (uint32_t)sizeof(struct wire) + (seq * 2654435761u >> 7) % (SLOT - 8);
}

static const uint8_t *payload_of(uint32_t seq)
{
	return pattern + (seq * 64u) % PATTERN;
}

static struct nic *open_nic(const char *fabric)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	cfg.transport = FERRY_TRANSPORT_SOFTIB;
	snprintf(cfg.softib_fabric, sizeof(cfg.softib_fabric), "%s", fabric);
	int err;
	char msg[256];
	struct nic *n = nic_open(&cfg, NULL, &err, msg, sizeof(msg));
	if (!n)
		fprintf(stderr, "nic_open: %s\n", msg);
	return n;
}

/* The receiving process: checks every packet, acks every ACK_EVERY. */
static int receiver(int sock, const char *fabric)
{
	struct nic *n = open_nic(fabric);
	if (!n)
		return 2;
	struct nic_route mine, theirs;
	nic_local_route(n, &mine);
	if (write(sock, &mine, sizeof(mine)) != sizeof(mine) ||
	    read(sock, &theirs, sizeof(theirs)) != sizeof(theirs))
		return 3;
	struct nic_peer *peer;
	if (nic_peer_create(n, &theirs, &peer))
		return 4;
	uint32_t ack_buf[2] __attribute__((aligned(8)));
	uint64_t corrupted = 0, received = 0, out_of_order = 0;
	uint32_t expect = 0;
	struct nic_rx rx[64];
	void *bufs[64];
	while (received < PACKETS) {
		unsigned r = nic_rx_burst(n, rx, 64);
		for (unsigned i = 0; i < r; i++) {
			struct wire w;
			memcpy(&w, rx[i].pkt, sizeof(w));
			if (w.seq != expect)
				out_of_order++;
			expect = w.seq + 1;
			if (w.len != rx[i].len || w.len != len_of(w.seq) ||
			    memcmp(rx[i].pkt + sizeof(w), payload_of(w.seq), w.len - sizeof(w)))
				corrupted++;
			received++;
			bufs[i] = rx[i].buf;
			if (received % ACK_EVERY == 0 || received == PACKETS) {
				ack_buf[0] = (uint32_t)received;
				ack_buf[1] = 0;
				struct nic_tx t = {.peer = peer, .nsge = 1,
						   .sge = {{ack_buf, sizeof(ack_buf), 0}}};
				nic_tx_burst(n, &t, 1); /* 8 bytes: inline, no lkey needed */
			}
		}
		if (r)
			nic_post_recvs(n, bufs, r);
	}
	uint64_t result[3] = {received, corrupted, out_of_order};
	int rc = write(sock, result, sizeof(result)) == sizeof(result) ? 0 : 5;
	/* Wait until the sender is done with us before the QP goes. */
	char c;
	if (read(sock, &c, 1) != 1)
		rc = 6;
	nic_flush(n);
	nic_peer_destroy(n, peer);
	nic_close(n);
	return rc;
}

Test(softib_crossproc, a_million_packets_between_two_processes_none_corrupted, .timeout = 300)
{
	char fabric[128];
	softib_test_fabric(fabric, sizeof(fabric), "xproc");
	make_pattern();
	int sv[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid_t pid = softib_test_fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(sv[0]);
		_exit(receiver(sv[1], fabric));
	}
	close(sv[1]);
	struct nic *n = open_nic(fabric);
	cr_assert_not_null(n);
	struct nic_route mine, theirs;
	nic_local_route(n, &mine);
	cr_assert_eq(read(sv[0], &theirs, sizeof(theirs)), (ssize_t)sizeof(theirs));
	cr_assert_eq(write(sv[0], &mine, sizeof(mine)), (ssize_t)sizeof(mine));
	struct nic_peer *peer;
	cr_assert_eq(nic_peer_create(n, &theirs, &peer), 0);

	size_t memlen = (size_t)WINDOW * SLOT;
	uint8_t *mem = aligned_alloc(4096, memlen);
	struct nic_mr mr;
	cr_assert_eq(nic_reg_mem(n, mem, memlen, &mr), 0);

	uint32_t seq = 0, acked = 0;
	struct nic_tx tx[32];
	struct nic_rx rx[32];
	void *bufs[32];
	while (acked < PACKETS) {
		unsigned k = 0;
		while (k < 32 && seq < PACKETS && seq - acked < WINDOW) {
			uint8_t *slot = mem + (size_t)(seq % WINDOW) * SLOT;
			struct wire w = {.seq = seq, .len = len_of(seq)};
			memcpy(slot, &w, sizeof(w));
			memcpy(slot + sizeof(w), payload_of(seq), w.len - sizeof(w));
			/* Header and payload as two SGEs, as the rpc layer sends them. */
			tx[k++] = (struct nic_tx){.peer = peer, .nsge = 2,
						  .sge = {{slot, 8, mr.lkey},
							  {slot + 8, w.len - 8, mr.lkey}}};
			seq++;
		}
		if (k)
			cr_assert_eq(nic_tx_burst(n, tx, k), k);
		unsigned r = nic_rx_burst(n, rx, 32);
		for (unsigned i = 0; i < r; i++) {
			uint32_t a;
			memcpy(&a, rx[i].pkt, 4);
			if (a > acked)
				acked = a;
			bufs[i] = rx[i].buf;
		}
		if (r)
			nic_post_recvs(n, bufs, r);
	}
	uint64_t result[3];
	cr_assert_eq(read(sv[0], result, sizeof(result)), (ssize_t)sizeof(result));
	cr_assert_eq(write(sv[0], "x", 1), 1);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "receiver exit %d", WEXITSTATUS(st));
	cr_assert_eq(result[0], PACKETS);
	cr_assert_eq(result[1], 0, "corrupted packets");
	cr_assert_eq(result[2], 0, "packets out of order");
	nic_flush(n);
	nic_dereg_mem(n, &mr);
	nic_peer_destroy(n, peer);
	nic_close(n);
	free(mem);
	close(sv[0]);
	softib_test_fabric_remove(fabric);
}
