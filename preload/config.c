/* FERRY_ENABLE, FERRY_PORTS and FERRY_SPIN_US, parsed as the transport's
 * variables are and in the same walk (ferry_config_from_env's owners). */
#include "autoconfig.h"

#include "preload/config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void preload_config_defaults(struct preload_config *pc)
{
	memset(pc, 0, sizeof(*pc));
	pc->enable = true;
	pc->spin_us = 50;
}

static int parse_ports(const char *v, struct preload_config *pc)
{
	pc->n_port_ranges = 0;
	if (!strcasecmp(v, "all") || *v == '\0')
		return 0;
	const char *p = v;
	while (*p) {
		char *end;
		errno = 0;
		unsigned long lo = strtoul(p, &end, 10), hi;
		if (errno || end == p || lo < 1 || lo > 65535)
			return -1;
		hi = lo;
		p = end;
		if (*p == '-') {
			p++;
			hi = strtoul(p, &end, 10);
			if (errno || end == p || hi < lo || hi > 65535)
				return -1;
			p = end;
		}
		if (pc->n_port_ranges == PRELOAD_PORT_RANGES_MAX)
			return -1;
		pc->ports[pc->n_port_ranges].lo = (uint16_t)lo;
		pc->ports[pc->n_port_ranges].hi = (uint16_t)hi;
		pc->n_port_ranges++;
		if (*p == ',')
			p++;
		else if (*p)
			return -1;
	}
	return 0;
}

int preload_config_set(struct preload_config *pc, const char *name, const char *v, char *err,
		       size_t errlen)
{
	unsigned long u;
	bool b;

	if (!strcmp(name, "FERRY_ENABLE")) {
		if (ferry_config_parse_bool(v, &b))
			return ferry_config_refuse(err, errlen, name, v,
						   "1|0|on|off|yes|no|true|false");
		pc->enable = b;
	} else if (!strcmp(name, "FERRY_PORTS")) {
		if (parse_ports(v, pc))
			return ferry_config_refuse(err, errlen, name, v,
						   "all, or a comma list of ports and ranges such as "
						   "6379,11000-11999");
	} else if (!strcmp(name, "FERRY_SPIN_US")) {
		if (ferry_config_parse_uint(v, 0, 1000000, &u))
			return ferry_config_refuse(err, errlen, name, v,
						   "microseconds from 0 to 1000000");
		pc->spin_us = (unsigned)u;
	} else {
		return -ENOENT;
	}
	return 0;
}

static int preload_config_owner_set(void *settings, const char *name, const char *value,
				    char *err, size_t errlen)
{
	return preload_config_set(settings, name, value, err, errlen);
}

int preload_config_from_env(struct preload_config *pc, struct ferry_config *cfg, char *err,
			    size_t errlen)
{
	preload_config_defaults(pc);
	const struct ferry_config_owner owner = {.set = preload_config_owner_set, .settings = pc};
	return ferry_config_from_env(cfg, &owner, 1, err, errlen);
}

bool preload_config_port_allowed(const struct preload_config *pc, uint16_t port)
{
	if (pc->n_port_ranges == 0)
		return true;
	for (unsigned i = 0; i < pc->n_port_ranges; i++)
		if (port >= pc->ports[i].lo && port <= pc->ports[i].hi)
			return true;
	return false;
}
