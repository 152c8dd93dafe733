/*
 * Test-only fault injection on an endpoint's receive path (FERRY_FAULT):
 * each arriving packet is dropped, duplicated or held back behind the next
 * one with the configured probabilities, from a seeded generator, so a run
 * is reproducible. The kernel here has no netem; this is how tests and
 * benchmarks exercise loss recovery.
 */
#ifndef FERRY_FAULT_H
#define FERRY_FAULT_H

#include <stdbool.h>
#include <stdint.h>

#include "transport/config.h"

enum fault_action {
	FAULT_PASS,
	FAULT_DROP,
	FAULT_DUP,     /* process the packet twice */
	FAULT_REORDER, /* hold a copy, process it after the next packet */
};

struct fault {
	struct ferry_fault_config cfg;
	uint64_t rng;
	bool enabled;
	unsigned drop_next; /* these many arriving next are dropped (fault_drop_next) */
};

void fault_init(struct fault *f, const struct ferry_fault_config *cfg);

/* The fate of the next packet. */
enum fault_action fault_next(struct fault *f);

/* Tests: the next n packets to arrive are dropped, whatever the rest of
 * the configuration says. */
void fault_drop_next(struct fault *f, unsigned n);

#endif
