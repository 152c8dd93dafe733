/*
 * The interposer's own settings: FERRY_ENABLE, FERRY_PORTS, FERRY_SPIN_US.
 * Read in the same walk as the transport's (transport/config.h), so a
 * FERRY_* name neither owns is refused, naming it.
 */
#ifndef FERRY_PRELOAD_CONFIG_H
#define FERRY_PRELOAD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/config.h"

#define PRELOAD_PORT_RANGES_MAX 32
struct preload_port_range {
	uint16_t lo, hi;
};

struct preload_config {
	bool enable;            /* FERRY_ENABLE */
	unsigned n_port_ranges; /* FERRY_PORTS; 0 ranges = all ports */
	struct preload_port_range ports[PRELOAD_PORT_RANGES_MAX];
	unsigned spin_us;       /* FERRY_SPIN_US: busy-poll before sleeping */
};

/* Fills *pc with defaults. */
void preload_config_defaults(struct preload_config *pc);

/*
 * Reads every FERRY_* variable over the defaults, the interposer's into pc
 * and the transport's into cfg, as ferry_config_from_env does: -EINVAL with
 * a message naming the variable on a value it cannot use or a name nobody
 * owns. Does not allocate.
 */
int preload_config_from_env(struct preload_config *pc, struct ferry_config *cfg, char *err,
			    size_t errlen);

/* Parses one of the interposer's variables (tests); -ENOENT for another name. */
int preload_config_set(struct preload_config *pc, const char *name, const char *value,
		       char *err, size_t errlen);

/* Whether a TCP port passes FERRY_PORTS. */
bool preload_config_port_allowed(const struct preload_config *pc, uint16_t port);

#endif
