/* FERRY_* environment parsing: every value checked, every refusal explained,
 * one walk over the environment for the transport's variables and those of
 * other owners (the interposer's, preload/config.c). */
#include "autoconfig.h"

#include "transport/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/nic.h"
#include "transport/pkthdr.h"

extern char **environ;

void ferry_config_defaults(struct ferry_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->transport = FERRY_TRANSPORT_AUTO;
	cfg->log_level = FERRY_LOG_WARN;
	cfg->session_slots = 8;
	cfg->session_credits = 0; /* ferry_session_credits */
	cfg->rto_us = 2000;
	/* As long as Linux TCP retransmits to a silent peer before it gives
	 * up (tcp_retries2 = 15: RTOs from 200 ms doubling to the 120 s cap,
	 * 924.6 s in all): a peer on another host may be stalled, not gone. */
	cfg->failure_timeout_ms = 924600;
	cfg->heartbeat_ms = 100;
	cfg->connect_timeout_ms = 200;
	cfg->mtu = 0;
	cfg->congestion_control = FERRY_CC_AUTO;
	cfg->link_gbps = 25.0;
	cfg->udp_gso = FERRY_UDP_GSO_AUTO;
	cfg->fault.seed = 1;
	cfg->ib_port = 0;
	cfg->gid_index = -1;
}

unsigned ferry_session_credits(const struct ferry_config *cfg, uint32_t max_pkt_size)
{
	if (cfg->session_credits)
		return cfg->session_credits;
	uint32_t data = max_pkt_size > PKTHDR_SIZE ? max_pkt_size - PKTHDR_SIZE : 1;
	uint32_t n = (FERRY_CREDIT_BYTES + data - 1) / data;
	uint32_t least = 2u * cfg->session_slots > FERRY_CREDITS_MIN ? 2u * cfg->session_slots
								     : FERRY_CREDITS_MIN;
	return n < least ? least : n > FERRY_CREDITS_MAX ? FERRY_CREDITS_MAX : n;
}

int ferry_config_refuse(char *err, size_t errlen, const char *name, const char *value,
			const char *accepts)
{
	if (err && errlen)
		snprintf(err, errlen, "%s=%s is not usable: %s accepts %s", name, value,
			 name, accepts);
	return -EINVAL;
}

int ferry_config_parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = {"1", "on", "yes", "true"};
	static const char *const no[] = {"0", "off", "no", "false"};
	for (size_t i = 0; i < 4; i++) {
		if (!strcasecmp(v, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(v, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

int ferry_config_parse_uint(const char *v, unsigned long lo, unsigned long hi,
			    unsigned long *out)
{
	char *end;
	if (*v == '\0' || *v == '-' || *v == '+')
		return -1;
	errno = 0;
	unsigned long x = strtoul(v, &end, 10);
	if (errno || *end != '\0' || x < lo || x > hi)
		return -1;
	*out = x;
	return 0;
}

/* "auto" (0) or a boolean: on (1), off (2); -1 for anything else. */
static int parse_auto_bool(const char *v)
{
	bool b;
	if (!strcmp(v, "auto"))
		return 0;
	if (ferry_config_parse_bool(v, &b))
		return -1;
	return b ? 1 : 2;
}

static int parse_prob(const char *v, double *out)
{
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end != '\0' || !(x >= 0.0 && x <= 1.0))
		return -1;
	*out = x;
	return 0;
}

static int parse_fault(const char *v, struct ferry_fault_config *f)
{
	char buf[256];
	if (strlen(v) >= sizeof(buf))
		return -1;
	strcpy(buf, v);
	f->drop = f->dup = f->reorder = 0.0;
	if (!strcasecmp(buf, "off") || buf[0] == '\0')
		return 0;
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq)
			return -1;
		*eq = '\0';
		const char *key = tok, *val = eq + 1;
		if (!strcmp(key, "drop")) {
			if (parse_prob(val, &f->drop))
				return -1;
		} else if (!strcmp(key, "dup")) {
			if (parse_prob(val, &f->dup))
				return -1;
		} else if (!strcmp(key, "reorder")) {
			if (parse_prob(val, &f->reorder))
				return -1;
		} else if (!strcmp(key, "seed")) {
			char *end;
			errno = 0;
			unsigned long long s = strtoull(val, &end, 10);
			if (errno || end == val || *end)
				return -1;
			f->seed = s;
		} else {
			return -1;
		}
	}
	return 0;
}

static int copy_string(const char *v, char *dst, size_t cap)
{
	size_t n = strlen(v);
	if (n >= cap)
		return -1;
	memcpy(dst, v, n + 1);
	return 0;
}

/* One of the transport's variables; -ENOENT when name is not one of them. */
static int config_set(struct ferry_config *cfg, const char *name, const char *v, char *err,
		      size_t errlen)
{
	unsigned long u;

	if (!strcmp(name, "FERRY_TRANSPORT")) {
		const struct nic_transport *t = nic_transport_find(v);
		if (!t) {
			char names[128];
			nic_transport_list(names, sizeof(names), "|");
			return ferry_config_refuse(err, errlen, name, v, names);
		}
		cfg->transport = t->kind;
	} else if (!strcmp(name, "FERRY_PEERS")) {
		if (copy_string(v, cfg->peers, sizeof(cfg->peers)))
			return ferry_config_refuse(err, errlen, name, v, "host:port[,host:port...] under 1024 bytes");
	} else if (!strcmp(name, "FERRY_LOG")) {
		if (!strcmp(v, "error"))
			cfg->log_level = FERRY_LOG_ERROR;
		else if (!strcmp(v, "warn"))
			cfg->log_level = FERRY_LOG_WARN;
		else if (!strcmp(v, "info"))
			cfg->log_level = FERRY_LOG_INFO;
		else if (!strcmp(v, "debug"))
			cfg->log_level = FERRY_LOG_DEBUG;
		else
			return ferry_config_refuse(err, errlen, name, v, "error|warn|info|debug");
	} else if (!strcmp(name, "FERRY_LOG_FILE")) {
		if (copy_string(v, cfg->log_file, sizeof(cfg->log_file)))
			return ferry_config_refuse(err, errlen, name, v, "a path under 512 bytes");
	} else if (!strcmp(name, "FERRY_STATS")) {
		if (copy_string(v, cfg->stats_path, sizeof(cfg->stats_path)))
			return ferry_config_refuse(err, errlen, name, v, "a path under 512 bytes (%p = pid)");
	} else if (!strcmp(name, "FERRY_SLOTS")) {
		/* A power of two keeps every outstanding request on its own server
		 * slot, whose count is fixed at RPC_SERVER_SLOTS (64). */
		if (ferry_config_parse_uint(v, 1, 64, &u) || (u & (u - 1)))
			return ferry_config_refuse(err, errlen, name, v,
				      "a power of two from 1 to 64 (requests in flight per session direction)");
		cfg->session_slots = (unsigned)u;
	} else if (!strcmp(name, "FERRY_CREDITS")) {
		if (ferry_config_parse_uint(v, 1, FERRY_CREDITS_MAX, &u))
			return ferry_config_refuse(err, errlen, name, v, "1 to 1024 packets in flight per session direction");
		cfg->session_credits = (unsigned)u;
	} else if (!strcmp(name, "FERRY_RTO_US")) {
		if (ferry_config_parse_uint(v, 50, 10000000, &u))
			return ferry_config_refuse(err, errlen, name, v, "microseconds from 50 to 10000000");
		cfg->rto_us = (unsigned)u;
	} else if (!strcmp(name, "FERRY_FAILURE_TIMEOUT_MS")) {
		if (ferry_config_parse_uint(v, 10, 3600000, &u))
			return ferry_config_refuse(err, errlen, name, v, "milliseconds from 10 to 3600000");
		cfg->failure_timeout_ms = (unsigned)u;
	} else if (!strcmp(name, "FERRY_HEARTBEAT_MS")) {
		if (ferry_config_parse_uint(v, 1, 600000, &u))
			return ferry_config_refuse(err, errlen, name, v, "milliseconds from 1 to 600000");
		cfg->heartbeat_ms = (unsigned)u;
	} else if (!strcmp(name, "FERRY_CONNECT_TIMEOUT_MS")) {
		if (ferry_config_parse_uint(v, 1, 600000, &u))
			return ferry_config_refuse(err, errlen, name, v, "milliseconds from 1 to 600000");
		cfg->connect_timeout_ms = (unsigned)u;
	} else if (!strcmp(name, "FERRY_MTU")) {
		if (ferry_config_parse_uint(v, 0, 65507, &u) || (u != 0 && u < 256))
			return ferry_config_refuse(err, errlen, name, v, "0 (path MTU) or bytes from 256 to 65507");
		cfg->mtu = (unsigned)u;
	} else if (!strcmp(name, "FERRY_CC")) {
		int t = parse_auto_bool(v);
		if (t < 0)
			return ferry_config_refuse(err, errlen, name, v, "auto|on|off|1|0");
		cfg->congestion_control = t == 0 ? FERRY_CC_AUTO : t == 1 ? FERRY_CC_ON : FERRY_CC_OFF;
	} else if (!strcmp(name, "FERRY_LINK_GBPS")) {
		if (ferry_config_parse_uint(v, 1, 800, &u))
			return ferry_config_refuse(err, errlen, name, v, "whole Gbit/s from 1 to 800");
		cfg->link_gbps = (double)u;
	} else if (!strcmp(name, "FERRY_UDP_GSO")) {
		int t = parse_auto_bool(v);
		if (t < 0)
			return ferry_config_refuse(err, errlen, name, v, "auto|on|off|1|0");
		cfg->udp_gso = t == 0 ? FERRY_UDP_GSO_AUTO : t == 1 ? FERRY_UDP_GSO_ON : FERRY_UDP_GSO_OFF;
	} else if (!strcmp(name, "FERRY_FAULT")) {
		if (parse_fault(v, &cfg->fault))
			return ferry_config_refuse(err, errlen, name, v,
				      "off, or drop=P,dup=P,reorder=P,seed=N with probabilities in [0,1]");
	} else if (!strcmp(name, "FERRY_DEVICE")) {
		if (copy_string(v, cfg->device, sizeof(cfg->device)))
			return ferry_config_refuse(err, errlen, name, v, "a verbs device name under 64 bytes");
	} else if (!strcmp(name, "FERRY_IB_PORT")) {
		if (ferry_config_parse_uint(v, 0, 255, &u))
			return ferry_config_refuse(err, errlen, name, v, "a port number from 1 to 255, or 0 for the first active");
		cfg->ib_port = (unsigned)u;
	} else if (!strcmp(name, "FERRY_GID_INDEX")) {
		if (!strcmp(v, "auto"))
			cfg->gid_index = -1;
		else if (ferry_config_parse_uint(v, 0, 255, &u))
			return ferry_config_refuse(err, errlen, name, v, "auto or a GID table index from 0 to 255");
		else
			cfg->gid_index = (int)u;
	} else if (!strcmp(name, "FERRY_SOFTIB_FABRIC")) {
		if (copy_string(v, cfg->softib_fabric, sizeof(cfg->softib_fabric)) ||
		    strchr(v, '/'))
			return ferry_config_refuse(err, errlen, name, v, "a name without '/' under 128 bytes");
	} else {
		return -ENOENT;
	}
	return 0;
}

static int not_ours(char *err, size_t errlen, const char *name)
{
	if (err && errlen)
		snprintf(err, errlen, "%s is not a ferry variable (see ferry(7))", name);
	return -EINVAL;
}

int ferry_config_set(struct ferry_config *cfg, const char *name, const char *v, char *err,
		     size_t errlen)
{
	int rc = config_set(cfg, name, v, err, errlen);
	return rc == -ENOENT ? not_ours(err, errlen, name) : rc;
}

/* Variables that tools and tests use but that do not configure the library. */
static bool ignored_name(const char *name)
{
	return !strncmp(name, "FERRY_TEST_", 11) || !strcmp(name, "FERRY_LIB");
}

int ferry_config_from_env(struct ferry_config *cfg, const struct ferry_config_owner *owners,
			  unsigned n_owners, char *err, size_t errlen)
{
	ferry_config_defaults(cfg);
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "FERRY_", 6))
			continue;
		const char *eq = strchr(*e, '=');
		if (!eq)
			continue;
		char name[64];
		size_t n = (size_t)(eq - *e);
		if (n >= sizeof(name)) {
			if (err && errlen)
				snprintf(err, errlen, "%.40s... is not a ferry variable", *e);
			return -EINVAL;
		}
		memcpy(name, *e, n);
		name[n] = '\0';
		if (ignored_name(name))
			continue;
		int rc = config_set(cfg, name, eq + 1, err, errlen);
		for (unsigned i = 0; rc == -ENOENT && i < n_owners; i++)
			rc = owners[i].set(owners[i].settings, name, eq + 1, err, errlen);
		if (rc == -ENOENT)
			return not_ours(err, errlen, name);
		if (rc)
			return rc;
	}
	return 0;
}
