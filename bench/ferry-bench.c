/*
 * ferry-bench: the transport's microbenchmarks (latency, request rate,
 * bandwidth), eRPC-style, over any datapath.
 *
 *   ferry-bench --transport NAME --test latency|rate|bandwidth [--size BYTES]
 *               [--batch B] [--seconds S] [--drop P]      server forked, loopback
 *   ferry-bench ... --server ADDR                          serve (forever or S seconds)
 *   ferry-bench ... --connect ADDR                         client of a remote server
 *
 * --batch is the number of requests kept in flight (rate and bandwidth;
 * latency always has one).
 *
 * Prints one JSON object per line; pkts is what the client sent while it
 * measured, and ns_per_pkt the measured time over it (for bandwidth, the time
 * each packet took on the path). The client thread runs the event loop
 * itself and never sleeps; the server spins FERRY_SPIN_US after the last
 * packet, then sleeps on the nic.
 */
#include "autoconfig.h"

#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/pin.h"
#include "mgmt/mgmt.h"
#include "mgmt/nexus.h"
#include "preload/config.h"
#include "transport/clock.h"
#include "transport/config.h"
#include "transport/pkthdr.h"
#include "transport/rpc.h"
#include "transport/stats.h"

enum bench_test { TEST_LATENCY, TEST_RATE, TEST_BANDWIDTH };
static const char *const test_names[] = {"latency", "rate", "bandwidth"};

#define REQ_ECHO 1 /* answered with as many bytes */
#define REQ_SINK 2 /* answered with 32 bytes */
#define SINK_RESP 32u
#define WARMUP_NS 200000000ull
#define DRAIN_NS 5000000000ull
#define MAX_BATCH 1024u

struct opts {
	const char *transport;
	enum bench_test test;
	uint32_t size;
	unsigned batch;
	double seconds;
	double drop;
	const char *serve;   /* --server ADDR */
	const char *connect; /* --connect ADDR */
};

static void usage(void)
{
	fprintf(stderr,
		"usage: ferry-bench --transport NAME --test latency|rate|bandwidth [--size BYTES]\n"
		"                   [--batch B] [--seconds S] [--drop P]\n"
		"                   [--server ADDR | --connect ADDR]\n"
		"  without --server/--connect a server is forked and both run over loopback\n");
	exit(2);
}

static void die(const char *what, int err)
{
	fprintf(stderr, "ferry-bench: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static struct opts parse_opts(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"transport", required_argument, NULL, 't'}, {"test", required_argument, NULL, 'T'},
		{"size", required_argument, NULL, 's'},      {"batch", required_argument, NULL, 'b'},
		{"seconds", required_argument, NULL, 'S'},   {"drop", required_argument, NULL, 'd'},
		{"server", required_argument, NULL, 'l'},    {"connect", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0}};
	struct opts o = {.transport = NULL, .test = TEST_LATENCY, .batch = 1, .seconds = -1};
	bool have_test = false;
	int c;
	char *end;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 't':
			o.transport = optarg;
			break;
		case 'T':
			for (unsigned i = 0; i < 3; i++)
				if (!strcmp(optarg, test_names[i])) {
					o.test = (enum bench_test)i;
					have_test = true;
				}
			if (!have_test)
				usage();
			break;
		case 's': {
			unsigned long v = strtoul(optarg, &end, 10);
			if (*end || v == 0 || v > RPC_MAX_MSG_SIZE) {
				fprintf(stderr, "ferry-bench: --size wants 1..%u bytes\n", RPC_MAX_MSG_SIZE);
				exit(2);
			}
			o.size = (uint32_t)v;
			break;
		}
		case 'b': {
			unsigned long v = strtoul(optarg, &end, 10);
			if (*end || v == 0 || v > MAX_BATCH)
				usage();
			o.batch = (unsigned)v;
			break;
		}
		case 'S':
			o.seconds = strtod(optarg, &end);
			if (*end || !(o.seconds > 0))
				usage();
			break;
		case 'd':
			o.drop = strtod(optarg, &end);
			if (*end || !(o.drop >= 0 && o.drop <= 1))
				usage();
			break;
		case 'l':
			o.serve = optarg;
			break;
		case 'c':
			o.connect = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc || !o.transport || (!have_test && !o.serve) || (o.serve && o.connect))
		usage();
	if (o.size == 0)
		o.size = o.test == TEST_BANDWIDTH ? 1u << 20 : 32;
	return o;
}

/* "host:port" or "[v6]:port" into a socket address. */
static void parse_addr(const char *spec, struct sockaddr_storage *ss, socklen_t *len)
{
	char host[256];
	const char *port;
	const char *colon = spec[0] == '[' ? strstr(spec, "]:") : strrchr(spec, ':');
	if (!colon || (size_t)(colon - spec) >= sizeof(host)) {
		fprintf(stderr, "ferry-bench: '%s' is not host:port\n", spec);
		exit(2);
	}
	if (spec[0] == '[') {
		memcpy(host, spec + 1, (size_t)(colon - spec - 1));
		host[colon - spec - 1] = '\0';
		port = colon + 2;
	} else {
		memcpy(host, spec, (size_t)(colon - spec));
		host[colon - spec] = '\0';
		port = colon + 1;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM,
				 .ai_flags = AI_NUMERICSERV | AI_PASSIVE}, *res;
	int err = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (err) {
		fprintf(stderr, "ferry-bench: %s: %s\n", spec, gai_strerror(err));
		exit(2);
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
}

/* FERRY_SPIN_US, the interposer's setting, which the server loop follows too. */
static unsigned bench_spin_us;

static struct nexus *bench_nexus(void)
{
	struct ferry_config cfg;
	struct preload_config pcfg;
	char msg[512];
	int err = preload_config_from_env(&pcfg, &cfg, msg, sizeof(msg));
	bench_spin_us = pcfg.spin_us;
	if (err) {
		fprintf(stderr, "ferry-bench: %s\n", msg);
		exit(2);
	}
	struct nexus *nx = nexus_create(&cfg, &err, msg, sizeof(msg));
	if (!nx) {
		fprintf(stderr, "ferry-bench: %s\n", msg);
		exit(1);
	}
	return nx;
}

/* ---- server ---- */

static volatile sig_atomic_t server_stop;

static void on_term(int sig)
{
	(void)sig;
	server_stop = 1;
}

static void handle(struct rpc *rpc, struct rpc_req *req, void *ctx)
{
	(void)ctx;
	const struct msgbuf *in = rpc_req_msg(req);
	bool echo = rpc_req_type(req) == REQ_ECHO;
	uint32_t size = echo ? in->data_size : SINK_RESP;
	struct msgbuf *out = rpc_resp_msg(rpc, req, size);
	if (!out)
		return; /* no memory: the client retransmits */
	memcpy(out->buf, in->buf, size < in->data_size ? size : in->data_size);
	rpc_respond(rpc, req);
}

/* Serves until SIGTERM/SIGINT or seconds (> 0) pass. port_fd, when >= 0,
 * receives the bound port. */
static void serve(const char *spec, double seconds, int port_fd)
{
	struct sigaction sa = {.sa_handler = on_term};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	struct nexus *nx = bench_nexus();
	struct rpc *rpc = nexus_rpc(nx);
	rpc_lock(rpc);
	rpc_register_handler(rpc, REQ_ECHO, handle, NULL);
	rpc_register_handler(rpc, REQ_SINK, handle, NULL);
	rpc_unlock(rpc);
	struct sockaddr_storage ss;
	socklen_t len;
	parse_addr(spec, &ss, &len);
	int rc = mgmt_listen(nexus_mgmt(nx), rpc, (struct sockaddr *)&ss, len);
	if (rc)
		die("listen", rc);
	uint16_t port = mgmt_listen_port(nexus_mgmt(nx), (struct sockaddr *)&ss, len);
	if (port_fd >= 0) {
		if (write(port_fd, &port, sizeof(port)) != sizeof(port))
			die("pipe", errno);
		close(port_fd);
	} else {
		printf("{\"server\":\"%s\",\"port\":%u,\"transport\":\"%s\"}\n", spec, port,
		       nexus_transport(nx));
		fflush(stdout);
	}
	uint64_t spin_ns = (uint64_t)bench_spin_us * 1000;
	uint64_t end = seconds > 0 ? clock_now_ns() + (uint64_t)(seconds * 1e9) : UINT64_MAX;
	uint64_t last = clock_now_ns();
	while (!server_stop) {
		rpc_lock(rpc);
		unsigned n = rpc_run_once(rpc);
		uint64_t now = clock_now_ns();
		int armed = 1, fd = -1;
		if (n)
			last = now;
		else if (now - last > spin_ns && !rpc_busy(rpc))
			armed = rpc_arm_notify(rpc);
		fd = rpc_notify_fd(rpc);
		rpc_unlock(rpc);
		if (armed == 0) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			poll(&p, 1, 10);
		}
		if (now >= end)
			break;
	}
	nexus_destroy(nx);
}

/* ---- client ---- */

struct bench;

struct slot {
	struct bench *b;
	struct msgbuf *msg;
	uint64_t sent_ns;
};

struct bench {
	struct rpc *rpc;
	int session;
	uint8_t type;
	bool recording, stopping;
	unsigned outstanding;
	uint64_t completed, errors, bytes;
	int last_error;
	uint64_t *samples; /* round trips in ns, while recording */
	size_t nsamples, cap;
};

static void record(struct bench *b, uint64_t rtt)
{
	if (b->nsamples == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1 << 16;
		uint64_t *s = realloc(b->samples, cap * sizeof(*s));
		if (!s)
			return;
		b->samples = s;
		b->cap = cap;
	}
	b->samples[b->nsamples++] = rtt;
}

static void on_done(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag);

static void send_slot(struct bench *b, struct slot *s)
{
	s->sent_ns = clock_now_ns();
	int rc = rpc_enqueue_request(b->rpc, b->session, b->type, s->msg, on_done, s);
	if (rc < 0) {
		b->errors++;
		b->last_error = rc;
		b->outstanding--;
	}
}

static void on_done(struct rpc *rpc, int status, const struct msgbuf *resp, void *tag)
{
	(void)rpc;
	(void)resp;
	struct slot *s = tag;
	struct bench *b = s->b;
	if (status < 0) {
		b->errors++;
		b->last_error = status;
		b->outstanding--;
		return;
	}
	if (b->recording) {
		record(b, clock_now_ns() - s->sent_ns);
		b->completed++;
		b->bytes += s->msg->data_size;
	}
	if (b->stopping)
		b->outstanding--;
	else
		send_slot(b, s);
}

static double pct_us(const uint64_t *sorted, size_t n, double q)
{
	if (n == 0)
		return 0;
	size_t i = (size_t)(q * (double)n);
	return (double)sorted[i < n ? i : n - 1] / 1000.0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Runs the event loop until now >= until or the window is empty. */
static void run_until(struct bench *b, uint64_t until)
{
	while (b->outstanding > 0 && clock_now_ns() < until) {
		rpc_lock(b->rpc);
		for (int i = 0; i < 64; i++)
			rpc_run_once(b->rpc);
		rpc_unlock(b->rpc);
	}
}

static int client(const struct opts *o, const char *spec)
{
	struct nexus *nx = bench_nexus();
	struct rpc *rpc = nexus_rpc(nx);
	struct sockaddr_storage ss;
	socklen_t len;
	parse_addr(spec, &ss, &len);
	int session = mgmt_connect(nexus_mgmt(nx), rpc, (struct sockaddr *)&ss, len, 5000);
	if (session < 0)
		die(spec, session);

	unsigned window = o->test == TEST_LATENCY ? 1 : o->batch;
	struct bench b = {.rpc = rpc, .session = session,
			  .type = o->test == TEST_BANDWIDTH ? REQ_SINK : REQ_ECHO};
	struct slot slots[MAX_BATCH];
	rpc_lock(rpc);
	for (unsigned i = 0; i < window; i++) {
		slots[i] = (struct slot){.b = &b, .msg = rpc_alloc_msg(rpc, o->size)};
		if (!slots[i].msg)
			die("rpc_alloc_msg", ENOMEM);
		memset(slots[i].msg->buf, (int)i, o->size);
	}
	b.outstanding = window;
	for (unsigned i = 0; i < window; i++)
		send_slot(&b, &slots[i]);
	rpc_unlock(rpc);

	const struct ferry_stats *st = nexus_stats(nx);
	double seconds = o->seconds > 0 ? o->seconds : 2.0;
	run_until(&b, clock_now_ns() + WARMUP_NS);
	uint64_t retx0 = st->retransmits, drops0 = st->drops, pkts0 = st->pkts_tx;
	b.recording = true;
	uint64_t t0 = clock_now_ns();
	run_until(&b, t0 + (uint64_t)(seconds * 1e9));
	b.recording = false;
	uint64_t t1 = clock_now_ns();
	uint64_t retx = st->retransmits - retx0, drops = st->drops - drops0;
	uint64_t pkts = st->pkts_tx - pkts0;
	b.stopping = true;
	run_until(&b, clock_now_ns() + DRAIN_NS);

	double secs = (double)(t1 - t0) / 1e9;
	/* The whole counter set rides along: it proves the path taken and
	 * explains drops (client side; the server's stay in its process). */
	char stats[4096];
	if (stats_format_json(st, nexus_transport(nx), stats, sizeof(stats)) < 0)
		strcpy(stats, "{}\n");
	stats[strcspn(stats, "\n")] = '\0';
	qsort(b.samples, b.nsamples, sizeof(*b.samples), cmp_u64);
	printf("{\"test\":\"%s\",\"transport\":\"%s\",\"size\":%u,\"batch\":%u,\"seconds\":%.3f,"
	       "\"requests\":%llu,\"errors\":%llu,\"p50_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,"
	       "\"rps\":%.0f,\"gbps\":%.3f,\"pkts\":%llu,\"ns_per_pkt\":%.0f,"
	       "\"retransmits\":%llu,\"drops\":%llu,\"drop\":%g,\"client_stats\":%s}\n",
	       test_names[o->test], nexus_transport(nx), o->size, window, secs,
	       (unsigned long long)b.completed, (unsigned long long)b.errors,
	       pct_us(b.samples, b.nsamples, 0.50), pct_us(b.samples, b.nsamples, 0.99),
	       pct_us(b.samples, b.nsamples, 0.999), (double)b.completed / secs,
	       (double)b.bytes * 8 / secs / 1e9, (unsigned long long)pkts,
	       pkts ? (double)(t1 - t0) / (double)pkts : 0.0, (unsigned long long)retx,
	       (unsigned long long)drops, o->drop, stats);
	fflush(stdout);
	if (b.errors)
		fprintf(stderr, "ferry-bench: %llu requests failed, last with %s\n",
			(unsigned long long)b.errors, strerror(-b.last_error));

	/* Requests still out after the drain belong to the transport; only
	 * free buffers that came back. */
	bool all_back = b.outstanding == 0;
	rpc_lock(rpc);
	for (unsigned i = 0; all_back && i < window; i++)
		rpc_free_msg(rpc, slots[i].msg);
	rpc_unlock(rpc);
	free(b.samples);
	nexus_destroy(nx);
	return b.errors || b.completed == 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct opts o = parse_opts(argc, argv);
	setenv("FERRY_TRANSPORT", o.transport, 1);
	if (o.drop > 0) {
		char fault[64];
		snprintf(fault, sizeof(fault), "drop=%g", o.drop);
		setenv("FERRY_FAULT", fault, 1);
	}
	if (o.serve) {
		serve(o.serve, o.seconds, -1);
		return 0;
	}
	if (o.connect)
		return client(&o, o.connect);

	int pfd[2];
	if (pipe(pfd) < 0)
		die("pipe", errno);
	pid_t pid = fork();
	if (pid < 0)
		die("fork", errno);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		close(pfd[0]);
		bench_pin(0);
		serve("127.0.0.1:0", 0, pfd[1]);
		_exit(0);
	}
	close(pfd[1]);
	uint16_t port;
	if (read(pfd[0], &port, sizeof(port)) != sizeof(port)) {
		fprintf(stderr, "ferry-bench: the server did not start\n");
		waitpid(pid, NULL, 0);
		return 1;
	}
	close(pfd[0]);
	bench_pin(1);
	char spec[32];
	snprintf(spec, sizeof(spec), "127.0.0.1:%u", port);
	int rc = client(&o, spec);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	return rc;
}
