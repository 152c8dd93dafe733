/*
 * The benchmarks' server and client each on a core of their own: on a
 * two-core machine the scheduler otherwise sometimes puts both spinning
 * processes on one core, and they take turns instead of running side by
 * side (figures then swing several-fold). Every baseline pins the same
 * way, so ratios compare like with like. BENCH_PIN=0 leaves the
 * placement to the scheduler (not a FERRY_ name: ferry refuses those it
 * does not know).
 */
#ifndef FERRY_BENCH_PIN_H
#define FERRY_BENCH_PIN_H

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* Pins the calling process to the nth CPU it may run on (0: server, 1:
 * client), when there are two or more; returns whether it did. */
static inline int bench_pin(int nth)
{
	const char *env = getenv("BENCH_PIN");
	if (env && strcmp(env, "0") == 0)
		return 0;
	cpu_set_t allowed;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || CPU_COUNT(&allowed) < 2)
		return 0;
	for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed) || seen++ != nth)
			continue;
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		return sched_setaffinity(0, sizeof(one), &one) == 0;
	}
	return 0;
}

#endif
