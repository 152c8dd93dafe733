/* Timely: line rate when RTT is low, decrease on high RTT or rising RTT,
 * additive and hyperactive increase when it falls, and the rate bounds. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "transport/timely.h"

#define LINK_GBPS 10.0
#define LINK_BPS (LINK_GBPS * 1e9 / 8)
#define STEP_NS 10000ull /* 10 us between samples: more than one min RTT */

static uint64_t now_ns = 1000000000ull;

static void feed(struct timely *t, double rtt_us)
{
	now_ns += STEP_NS;
	timely_update(t, rtt_us, now_ns);
}

static void assert_near(double got, double want)
{
	cr_assert(fabs(got - want) <= 1e-9 * fabs(want) + 1e-6, "got %.3f want %.3f", got, want);
}

static void init(struct timely *t)
{
	timely_init(t, LINK_GBPS, now_ns);
}

static void congest(struct timely *t)
{
	for (int i = 0; i < 10; i++)
		feed(t, 2 * TIMELY_T_HIGH_US);
	cr_assert_lt(timely_rate(t), LINK_BPS / 2);
}

Test(timely, starts_at_line_rate)
{
	struct timely t;
	init(&t);
	assert_near(timely_rate(&t), LINK_BPS);
	cr_assert(timely_uncongested(&t));
}

Test(timely, low_rtt_keeps_line_rate)
{
	struct timely t;
	init(&t);
	for (int i = 0; i < 1000; i++) {
		feed(&t, 3.0 + (i % 48)); /* 3 .. 50 us, noisy */
		cr_assert(timely_uncongested(&t), "sample %d", i);
	}
	assert_near(timely_rate(&t), LINK_BPS);
}

Test(timely, rtt_above_t_high_decreases_by_overshoot)
{
	struct timely t;
	init(&t);
	feed(&t, 2 * TIMELY_T_HIGH_US);
	/* Decrease by beta times the overshoot fraction (1 - T_high / rtt). */
	assert_near(timely_rate(&t), LINK_BPS * (1 - TIMELY_BETA * 0.5));
	cr_assert_not(timely_uncongested(&t));
	double prev = timely_rate(&t);
	for (int i = 0; i < 20; i++) {
		feed(&t, 2 * TIMELY_T_HIGH_US);
		cr_assert_lt(timely_rate(&t), prev, "sample %d", i);
		prev = timely_rate(&t);
	}
}

Test(timely, rising_rtt_between_thresholds_decreases)
{
	struct timely t;
	init(&t);
	double prev = timely_rate(&t);
	for (double rtt = 100; rtt <= 300; rtt += 5) {
		feed(&t, rtt);
		cr_assert_gt(t.avg_rtt_diff_us, 0);
		if (prev > TIMELY_MIN_RATE)
			cr_assert_lt(timely_rate(&t), prev, "rtt %.0f", rtt);
		else
			assert_near(timely_rate(&t), TIMELY_MIN_RATE);
		prev = timely_rate(&t);
	}
	assert_near(timely_rate(&t), TIMELY_MIN_RATE);
}

/* Once the average has settled, a gentle rise cuts gently: the decrease is
 * beta times the normalised gradient. */
Test(timely, decrease_follows_the_gradient)
{
	struct timely t;
	init(&t);
	congest(&t);
	for (int i = 0; i < 60; i++) /* let the average forget the jump */
		feed(&t, 500);
	for (int i = 0; i < 30; i++) /* settle on a rise of 0.1 us per sample */
		feed(&t, 500 + 0.1 * i);
	double prev = timely_rate(&t), avg_before = t.avg_rtt_diff_us;
	feed(&t, 500 + 0.1 * 30);
	double avg = (1 - TIMELY_EWMA_ALPHA) * avg_before + TIMELY_EWMA_ALPHA * 0.1;
	cr_assert_gt(avg, 0);
	assert_near(timely_rate(&t), prev * (1 - TIMELY_BETA * avg / TIMELY_MIN_RTT_US));
}

Test(timely, one_update_at_most_halves_the_rate)
{
	struct timely t;
	init(&t);
	feed(&t, 900); /* gradient from the 2 us start is huge */
	assert_near(timely_rate(&t), LINK_BPS / 2);
}

Test(timely, falling_rtt_increases_additively_then_hyperactively)
{
	struct timely t;
	init(&t);
	congest(&t);
	double prev = timely_rate(&t);
	for (int i = 1; i <= 8; i++) {
		feed(&t, 900 - 20 * i); /* between T_low and T_high, falling */
		double step = TIMELY_ADD_RATE * (i >= TIMELY_HAI_THRESH ? TIMELY_HAI_FACTOR : 1);
		assert_near(timely_rate(&t) - prev, step);
		prev = timely_rate(&t);
	}
	/* One rise ends HAI mode even if the average still points down. */
	feed(&t, 741);
	cr_assert_lt(t.avg_rtt_diff_us, 0);
	assert_near(timely_rate(&t) - prev, TIMELY_ADD_RATE);
}

Test(timely, low_rtt_climbs_back_to_line_rate_and_no_further)
{
	struct timely t;
	init(&t);
	congest(&t);
	double prev = timely_rate(&t);
	int steps = 0;
	while (!timely_uncongested(&t)) {
		feed(&t, TIMELY_T_LOW_US - 20);
		double rate = timely_rate(&t);
		cr_assert_leq(rate, LINK_BPS);
		if (rate < LINK_BPS)
			assert_near(rate - prev, TIMELY_ADD_RATE);
		prev = rate;
		cr_assert_lt(++steps, 1000, "did not recover");
	}
	assert_near(timely_rate(&t), LINK_BPS);
	feed(&t, 10);
	assert_near(timely_rate(&t), LINK_BPS);
}

Test(timely, change_scales_with_time_since_last_update)
{
	struct timely t;
	init(&t);
	congest(&t);
	double r0 = timely_rate(&t);
	timely_update(&t, 20, now_ns); /* no time has passed */
	assert_near(timely_rate(&t), r0);
	now_ns += (uint64_t)(TIMELY_MIN_RTT_US * 1000 / 2);
	timely_update(&t, 20, now_ns); /* half a min RTT: half the increment */
	assert_near(timely_rate(&t) - r0, TIMELY_ADD_RATE / 2);
}

Test(timely, samples_below_min_rtt_are_ignored)
{
	struct timely t;
	init(&t);
	congest(&t);
	struct timely before = t;
	feed(&t, TIMELY_MIN_RTT_US / 2);
	feed(&t, NAN);
	cr_assert_eq(t.rate_bps, before.rate_bps);
	cr_assert_eq(t.prev_rtt_us, before.prev_rtt_us);
	cr_assert_eq(t.avg_rtt_diff_us, before.avg_rtt_diff_us);
	cr_assert_eq(t.neg_gradient_count, before.neg_gradient_count);
}

Test(timely, rate_stays_between_min_and_link)
{
	struct timely t;
	init(&t);
	for (int i = 0; i < 200; i++)
		feed(&t, 1e6);
	assert_near(timely_rate(&t), TIMELY_MIN_RATE);

	unsigned seed = 7;
	for (int i = 0; i < 20000; i++) {
		now_ns += (uint64_t)(rand_r(&seed) % 20000);
		double rtt = (rand_r(&seed) % 3 == 0) ? rand_r(&seed) % 60 : rand_r(&seed) % 5000;
		timely_update(&t, rtt, now_ns);
		cr_assert_geq(timely_rate(&t), TIMELY_MIN_RATE, "sample %d", i);
		cr_assert_leq(timely_rate(&t), LINK_BPS, "sample %d", i);
	}
}

Test(timely, link_slower_than_min_rate_stays_at_link)
{
	struct timely t;
	timely_init(&t, 0.01, now_ns); /* 1.25 MB/s */
	for (int i = 0; i < 50; i++)
		feed(&t, 5000);
	assert_near(timely_rate(&t), 0.01e9 / 8);
	cr_assert(timely_uncongested(&t));
}
