/* Timely's gradient algorithm, following eRPC's variant of the authors' code. */
#include "autoconfig.h"

#include "transport/timely.h"

void timely_init(struct timely *t, double link_gbps, uint64_t now_ns)
{
	*t = (struct timely){
		.link_bps = link_gbps * 1e9 / 8,
		.min_rtt_us = TIMELY_MIN_RTT_US,
		.prev_rtt_us = TIMELY_MIN_RTT_US,
		.last_update_ns = now_ns,
	};
	t->rate_bps = t->link_bps;
}

static double timely_clamp(const struct timely *t, double rate)
{
	if (rate > t->link_bps)
		rate = t->link_bps;
	double floor = TIMELY_MIN_RATE < t->link_bps ? TIMELY_MIN_RATE : t->link_bps;
	return rate < floor ? floor : rate;
}

void timely_update(struct timely *t, double rtt_us, uint64_t now_ns)
{
	if (timely_uncongested(t) && rtt_us <= TIMELY_T_LOW_US)
		return;
	/* Retransmissions and clock jitter can yield samples under any real
	 * RTT; they carry no congestion signal. */
	if (!(rtt_us >= t->min_rtt_us))
		return;

	double rtt_diff = rtt_us - t->prev_rtt_us;
	t->neg_gradient_count = rtt_diff < 0 ? t->neg_gradient_count + 1 : 0;
	t->avg_rtt_diff_us = (1 - TIMELY_EWMA_ALPHA) * t->avg_rtt_diff_us +
			     TIMELY_EWMA_ALPHA * rtt_diff;

	uint64_t elapsed_ns = now_ns > t->last_update_ns ? now_ns - t->last_update_ns : 0;
	double delta = (double)elapsed_ns / (t->min_rtt_us * 1000.0);
	if (delta > 1.0)
		delta = 1.0;
	double ai = TIMELY_ADD_RATE * delta;
	double md = TIMELY_BETA * delta;
	double norm_grad = t->avg_rtt_diff_us / t->min_rtt_us;

	double rate = t->rate_bps, new_rate;
	if (rtt_us < TIMELY_T_LOW_US)
		new_rate = rate + ai;
	else if (rtt_us > TIMELY_T_HIGH_US)
		/* By the sample, not the average: a queue this deep needs no trend. */
		new_rate = rate * (1 - md * (1 - TIMELY_T_HIGH_US / rtt_us));
	else if (norm_grad <= 0)
		new_rate = rate + (t->neg_gradient_count >= TIMELY_HAI_THRESH ? TIMELY_HAI_FACTOR : 1) * ai;
	else
		new_rate = rate * (1 - md * norm_grad);

	/* A large gradient would otherwise drive the rate negative. */
	if (new_rate < rate * 0.5)
		new_rate = rate * 0.5;
	t->rate_bps = timely_clamp(t, new_rate);
	t->prev_rtt_us = rtt_us;
	t->last_update_ns = now_ns;
}
