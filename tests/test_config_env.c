/* FERRY_* parsing, the transport's variables and the interposer's in one
 * walk: good values taken, bad ones refused with the variable and what it
 * accepts. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "preload/config.h"
#include "transport/config.h"
#include "transport/nic.h"

static void refused(const char *name, const char *value, const char *accepts)
{
	struct ferry_config cfg;
	struct preload_config pc;
	char err[512] = "";
	cr_assert_eq(setenv(name, value, 1), 0);
	cr_assert_eq(preload_config_from_env(&pc, &cfg, err, sizeof(err)), -EINVAL, "%s=%s taken",
		     name, value);
	cr_assert(strstr(err, name), "message does not name %s: %s", name, err);
	cr_assert(strstr(err, accepts), "message does not say what %s accepts: %s", name, err);
	unsetenv(name);
}

Test(config, defaults_without_environment)
{
	struct ferry_config cfg;
	struct preload_config pc;
	char err[256];
	cr_assert_eq(preload_config_from_env(&pc, &cfg, err, sizeof(err)), 0, "%s", err);
	cr_assert(pc.enable);
	cr_assert_eq(pc.spin_us, 50);
	cr_assert_eq(cfg.transport, FERRY_TRANSPORT_AUTO);
	cr_assert_eq(cfg.session_slots, 8);
	cr_assert_eq(cfg.session_credits, 0, "sized by bytes");
	cr_assert_eq(cfg.udp_gso, FERRY_UDP_GSO_AUTO);
	cr_assert(preload_config_port_allowed(&pc, 6379));
}

/* Unset, credits keep FERRY_CREDIT_BYTES in flight, within two packets a
 * slot (eRPC's 32 at least) and FERRY_CREDITS' most; set, they are what
 * was said. */
Test(config, credits_are_sized_by_bytes_unless_set)
{
	struct ferry_config cfg;
	ferry_config_defaults(&cfg);
	cr_assert_eq(ferry_session_credits(&cfg, 1472), 729, "1 MiB of 1,440-byte packets");
	cr_assert_eq(ferry_session_credits(&cfg, 4096), 259, "1 MiB of 4,064-byte packets");
	cr_assert_eq(ferry_session_credits(&cfg, 65536), FERRY_CREDITS_MIN, "big packets: eRPC's 32");
	cr_assert_eq(ferry_session_credits(&cfg, 64), FERRY_CREDITS_MAX);
	cfg.session_slots = 64;
	cr_assert_eq(ferry_session_credits(&cfg, 65536), 128, "two packets a slot at least");
	cr_assert_eq(ferry_session_credits(&cfg, 1472), 729);
	cfg.session_credits = 2;
	cr_assert_eq(ferry_session_credits(&cfg, 1472), 2);
}

Test(config, values_are_taken)
{
	setenv("FERRY_TRANSPORT", "softib", 1);
	setenv("FERRY_PORTS", "6379,11000-11999", 1);
	setenv("FERRY_ENABLE", "off", 1);
	setenv("FERRY_FAULT", "drop=0.25,dup=0.5,seed=9", 1);
	setenv("FERRY_CREDITS", "64", 1);
	setenv("FERRY_UDP_GSO", "0", 1);
	setenv("FERRY_SPIN_US", "7", 1);
	setenv("FERRY_TEST_ANYTHING", "ignored", 1);
	struct ferry_config cfg;
	struct preload_config pc;
	char err[256] = "";
	cr_assert_eq(preload_config_from_env(&pc, &cfg, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(cfg.transport, FERRY_TRANSPORT_SOFTIB);
	cr_assert_not(pc.enable);
	cr_assert_eq(pc.spin_us, 7);
	cr_assert(preload_config_port_allowed(&pc, 6379));
	cr_assert(preload_config_port_allowed(&pc, 11500));
	cr_assert_not(preload_config_port_allowed(&pc, 6380));
	cr_assert_not(preload_config_port_allowed(&pc, 12000));
	cr_assert_float_eq(cfg.fault.drop, 0.25, 1e-12);
	cr_assert_float_eq(cfg.fault.dup, 0.5, 1e-12);
	cr_assert_eq(cfg.fault.seed, 9);
	cr_assert_eq(cfg.session_credits, 64);
	cr_assert_eq(cfg.udp_gso, FERRY_UDP_GSO_OFF);
}

Test(config, bad_values_are_refused_with_what_is_accepted)
{
	refused("FERRY_TRANSPORT", "rdma", "auto|udp|ib|softib");
	refused("FERRY_ENABLE", "maybe", "1|0|on|off");
	refused("FERRY_SLOTS", "3", "power of two");
	refused("FERRY_SLOTS", "128", "power of two");
	refused("FERRY_CREDITS", "0", "1 to 1024");
	refused("FERRY_PORTS", "70000", "comma list");
	refused("FERRY_PORTS", "10-5", "comma list");
	refused("FERRY_SPIN_US", "-1", "microseconds");
	refused("FERRY_SPIN_US", "12abc", "microseconds");
	refused("FERRY_LOG", "verbose", "error|warn|info|debug");
	refused("FERRY_FAULT", "drop=2", "probabilities in [0,1]");
	refused("FERRY_FAULT", "loss=0.1", "drop=P");
	refused("FERRY_MTU", "100", "bytes from 256");
	refused("FERRY_CC", "sometimes", "auto|on|off");
	refused("FERRY_UDP_GSO", "yes please", "auto|on|off|1|0");
	refused("FERRY_SOFTIB_FABRIC", "a/b", "without '/'");
}

Test(config, unknown_variable_is_refused)
{
	refused("FERRY_TRANSPRT", "udp", "not a ferry variable");
	refused("FERRY_SPIN", "50", "not a ferry variable");
}

/* The walk knows a name only through its owners: without the interposer's,
 * its variables are as unknown as a typo. */
Test(config, a_name_is_known_through_its_owner)
{
	struct ferry_config cfg;
	struct preload_config pc;
	char err[256] = "";
	cr_assert_eq(setenv("FERRY_PORTS", "6379", 1), 0);
	cr_assert_eq(ferry_config_from_env(&cfg, NULL, 0, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "FERRY_PORTS") && strstr(err, "not a ferry variable"), "%s", err);
	cr_assert_eq(preload_config_from_env(&pc, &cfg, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(preload_config_set(&pc, "FERRY_TRANSPORT", "udp", err, sizeof(err)), -ENOENT);
	cr_assert_eq(ferry_config_set(&cfg, "FERRY_PORTS", "6379", err, sizeof(err)), -EINVAL);
	unsetenv("FERRY_PORTS");
}

Test(config, every_transport_in_the_table_is_taken_by_its_name)
{
	char err[256];
	for (unsigned i = 0; i < nic_n_transports; i++) {
		const struct nic_transport *t = &nic_transports[i];
		struct ferry_config cfg;
		ferry_config_defaults(&cfg);
		cr_assert_eq(ferry_config_set(&cfg, "FERRY_TRANSPORT", t->name, err, sizeof(err)), 0,
			     "%s: %s", t->name, err);
		cr_assert_eq(cfg.transport, t->kind, "%s", t->name);
		cr_assert_str_eq(nic_transport_name(t->kind), t->name);
		cr_assert_eq(nic_transport_find(t->name), t);
	}
	char names[128];
	nic_transport_list(names, sizeof(names), "|");
	cr_assert_str_eq(names, "auto|udp|ib|softib", "the test datapath is not offered");
}
