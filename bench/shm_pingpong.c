/*
 * The physical limit of this machine for softib: a bare ping-pong between
 * two processes through one shared-memory page (a sequence number and the
 * payload per direction, both sides busy-polling), plus single-threaded
 * memcpy bandwidth of 1 MB buffers. Nothing of ferry or softib in it.
 *
 *   shm_pingpong [-n RTTS] [--warmup W] [--size B] [--memcpy-seconds S]
 *
 * Prints one JSON line: {"test":"shm_pingpong","size":32,"p50_us":..,
 * "p99_us":..,"p999_us":..,"rtts":N,"memcpy_1mb_gbps":..} (Gbit/s).
 */
#include "autoconfig.h"

#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/pin.h"

#define MAX_SIZE 4096u

struct mailbox {
	uint64_t seq __attribute__((aligned(64)));
	uint8_t payload[MAX_SIZE] __attribute__((aligned(64)));
};

struct shared {
	struct mailbox ping, pong;
	uint64_t stop __attribute__((aligned(64)));
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Echoes every ping until told to stop, copying the payload out and back
 * as a receiver and a sender would. */
static void echo(struct shared *s, uint32_t size)
{
	uint8_t local[MAX_SIZE];
	uint64_t last = 0;
	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		uint64_t seq = __atomic_load_n(&s->ping.seq, __ATOMIC_ACQUIRE);
		if (seq == last) {
			cpu_relax();
			continue;
		}
		memcpy(local, s->ping.payload, size);
		memcpy(s->pong.payload, local, size);
		__atomic_store_n(&s->pong.seq, seq, __ATOMIC_RELEASE);
		last = seq;
	}
}

static double memcpy_gbps(double seconds)
{
	size_t len = 1u << 20;
	uint8_t *src = malloc(len), *dst = malloc(len);
	if (!src || !dst)
		return 0;
	memset(src, 1, len);
	memset(dst, 2, len);
	uint64_t start = now_ns(), end = start + (uint64_t)(seconds * 1e9), copies = 0;
	uint64_t t;
	do {
		for (int i = 0; i < 16; i++) {
			memcpy(dst, src, len);
			src[copies % len]++;
			copies++;
		}
		t = now_ns();
	} while (t < end);
	double gbps = (double)copies * (double)len * 8.0 / (double)(t - start);
	volatile uint8_t sink = dst[len - 1];
	(void)sink;
	free(src);
	free(dst);
	return gbps;
}

int main(int argc, char **argv)
{
	unsigned long n = 200000, warmup = 20000;
	uint32_t size = 32;
	double mc_seconds = 0.5;
	static const struct option lo[] = {{"warmup", required_argument, NULL, 'w'},
					   {"size", required_argument, NULL, 's'},
					   {"memcpy-seconds", required_argument, NULL, 'm'},
					   {NULL, 0, NULL, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "n:", lo, NULL)) != -1) {
		switch (c) {
		case 'n': n = strtoul(optarg, NULL, 10); break;
		case 'w': warmup = strtoul(optarg, NULL, 10); break;
		case 's': size = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'm': mc_seconds = strtod(optarg, NULL); break;
		default:
			fprintf(stderr, "usage: shm_pingpong [-n RTTS] [--warmup W] [--size B<=%u] "
					"[--memcpy-seconds S]\n", MAX_SIZE);
			return 2;
		}
	}
	if (size > MAX_SIZE || n == 0) {
		fprintf(stderr, "shm_pingpong: --size at most %u, -n at least 1\n", MAX_SIZE);
		return 2;
	}
	struct shared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED) {
		perror("shm_pingpong: mmap");
		return 1;
	}
	memset(s, 0, sizeof(*s));
	pid_t pid = fork();
	if (pid < 0) {
		perror("shm_pingpong: fork");
		return 1;
	}
	if (pid == 0) {
		bench_pin(0);
		echo(s, size);
		_exit(0);
	}
	bench_pin(1);
	uint64_t *rtt = malloc(n * sizeof(*rtt));
	uint8_t msg[MAX_SIZE], back[MAX_SIZE];
	memset(msg, 0x5a, sizeof(msg));
	if (!rtt)
		return 1;
	for (uint64_t i = 1; i <= warmup + n; i++) {
		uint64_t t0 = now_ns();
		memcpy(s->ping.payload, msg, size);
		__atomic_store_n(&s->ping.seq, i, __ATOMIC_RELEASE);
		while (__atomic_load_n(&s->pong.seq, __ATOMIC_ACQUIRE) != i)
			cpu_relax();
		memcpy(back, s->pong.payload, size);
		uint64_t t1 = now_ns();
		if (i > warmup)
			rtt[i - warmup - 1] = t1 - t0;
		msg[i % size]++;
	}
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
	waitpid(pid, NULL, 0);
	qsort(rtt, n, sizeof(*rtt), cmp_u64);
	double gbps = memcpy_gbps(mc_seconds);
	printf("{\"test\":\"shm_pingpong\",\"size\":%u,\"p50_us\":%.3f,\"p99_us\":%.3f,"
	       "\"p999_us\":%.3f,\"rtts\":%lu,\"memcpy_1mb_gbps\":%.2f}\n",
	       size, (double)rtt[n / 2] / 1e3, (double)rtt[n * 99 / 100] / 1e3,
	       (double)rtt[n * 999 / 1000] / 1e3, n, gbps);
	free(rtt);
	munmap(s, sizeof(*s));
	return 0;
}
