/*
 * Timely rate control (Mittal et al., SIGCOMM 2015) as eRPC uses it: one
 * instance per session, fed an RTT sample per acknowledged packet, giving
 * the rate at which the session may send. eRPC's parameters are the
 * defaults (eRPC src/cc/timely.h and timely_sweep_params.h, which swept
 * alpha and beta). Not thread-safe.
 */
#ifndef FERRY_TIMELY_H
#define FERRY_TIMELY_H

#include <stdbool.h>
#include <stdint.h>

#define TIMELY_T_LOW_US 50.0      /* below: additive increase whatever the gradient */
#define TIMELY_T_HIGH_US 1000.0   /* above: decrease by how far the sample overshoots */
#define TIMELY_MIN_RTT_US 2.0     /* normalises the gradient; shorter samples are ignored */
#define TIMELY_EWMA_ALPHA 0.46    /* weight of the newest RTT difference */
#define TIMELY_BETA 0.26          /* multiplicative decrease factor */
#define TIMELY_ADD_RATE 5e6       /* additive increment, bytes/s per min RTT */
#define TIMELY_HAI_THRESH 5       /* negative gradients in a row before HAI */
#define TIMELY_HAI_FACTOR 5       /* HAI multiplies the increment by this */
#define TIMELY_MIN_RATE 15e6      /* bytes/s floor, so a session always drains */

struct timely {
	double link_bps;      /* line rate, bytes per second */
	double rate_bps;      /* current allowed rate, bytes per second */
	double prev_rtt_us;
	double avg_rtt_diff_us;
	double min_rtt_us;
	uint64_t last_update_ns;
	unsigned neg_gradient_count; /* HAI mode after several negative gradients */
};

/* Starts at line rate, link_gbps * 1e9 / 8 bytes per second. */
void timely_init(struct timely *t, double link_gbps, uint64_t now_ns);

/* Feeds one RTT sample (microseconds) taken at now_ns. A change is scaled by
 * the time since the previous update, in min RTTs, capped at one, so a burst
 * of acknowledgements does not move the rate more than one would per RTT.
 * At line rate with an RTT at or below T_low the sample is skipped entirely
 * (eRPC's bypass: the common case costs nothing). The rate stays within
 * [TIMELY_MIN_RATE, link rate] (or at the link rate if it is below the
 * floor) and never falls by more than half in one update. */
void timely_update(struct timely *t, double rtt_us, uint64_t now_ns);

/* Bytes per second the session may send at. */
static inline double timely_rate(const struct timely *t) { return t->rate_bps; }

/* eRPC's common case: at line rate, so pacing and the wheel can be skipped. */
static inline bool timely_uncongested(const struct timely *t) { return t->rate_bps >= t->link_bps; }

#endif
