/* Seeded fault decisions for the receive path. */
#include "autoconfig.h"

#include "transport/fault.h"

void fault_init(struct fault *f, const struct ferry_fault_config *cfg)
{
	f->cfg = *cfg;
	f->rng = cfg->seed ? cfg->seed : 1;
	f->enabled = cfg->drop > 0 || cfg->dup > 0 || cfg->reorder > 0;
	f->drop_next = 0;
}

/* splitmix64: small, fast and good enough for choosing fates. */
static uint64_t next_u64(struct fault *f)
{
	uint64_t z = (f->rng += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

void fault_drop_next(struct fault *f, unsigned n)
{
	f->drop_next = n;
	f->enabled = f->enabled || n > 0;
}

enum fault_action fault_next(struct fault *f)
{
	if (!f->enabled)
		return FAULT_PASS;
	if (f->drop_next) {
		f->drop_next--;
		return FAULT_DROP;
	}
	double x = (double)(next_u64(f) >> 11) * (1.0 / 9007199254740992.0);
	if (x < f->cfg.drop)
		return FAULT_DROP;
	x -= f->cfg.drop;
	if (x < f->cfg.dup)
		return FAULT_DUP;
	x -= f->cfg.dup;
	if (x < f->cfg.reorder)
		return FAULT_REORDER;
	return FAULT_PASS;
}
