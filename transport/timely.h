/*
 * Timely rate control (Mittal et al., SIGCOMM 2015) as eRPC uses it: one
 * instance per session, fed an RTT sample per acknowledged packet, giving
 * the rate at which the session may send. eRPC's parameters are the
 * defaults. Not thread-safe.
 */
#ifndef FERRY_TIMELY_H
#define FERRY_TIMELY_H

#include <stdbool.h>
#include <stdint.h>

struct timely {
	double link_bps;      /* line rate, bytes per second */
	double rate_bps;      /* current allowed rate, bytes per second */
	double prev_rtt_us;
	double avg_rtt_diff_us;
	double min_rtt_us;
	uint64_t last_update_ns;
	unsigned neg_gradient_count; /* HAI mode after several negative gradients */
};

void timely_init(struct timely *t, double link_gbps, uint64_t now_ns);

/* Feeds one RTT sample (microseconds) taken at now_ns. */
void timely_update(struct timely *t, double rtt_us, uint64_t now_ns);

/* Bytes per second the session may send at. */
static inline double timely_rate(const struct timely *t) { return t->rate_bps; }

/* eRPC's common case: at line rate, so pacing and the wheel can be skipped. */
static inline bool timely_uncongested(const struct timely *t) { return t->rate_bps >= t->link_bps; }

#endif
