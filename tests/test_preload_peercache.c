/*
 * connect()'s memory of sessions per destination: a listener shared by
 * several processes (prefork workers) answers the rendezvous from one or
 * another of them, and new connections are spread over those found, as the
 * kernel's accept spreads them over the workers; a destination only one
 * process answers keeps its one session, looked at again now and then.
 */
#include "autoconfig.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>

#include "preload/peercache.h"

static struct sockaddr_in dst;

static void pc_init(void)
{
	peercache_reset();
	dst = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(8080)};
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

TestSuite(peercache, .init = pc_init);

static const struct sockaddr *d(void)
{
	return (const struct sockaddr *)&dst;
}

/* One connect's choice: the session, or -1 with *another. */
static int pick(bool *another)
{
	uint64_t tok = 0;
	int s = peercache_session(d(), &tok, another);
	if (s >= 0)
		cr_assert_eq(tok, 1000u + (unsigned)s, "session %d came with its own token", s);
	return s;
}

Test(peercache, an_unknown_destination_rendezvous_plainly)
{
	bool another = true;
	cr_expect_eq(pick(&another), -1);
	cr_expect_not(another, "nothing to look past yet");
}

Test(peercache, the_first_connections_look_for_other_processes)
{
	peercache_set_session(d(), 3, 1003);
	for (int i = 1; i < PEERCACHE_PROBES; i++) {
		bool another = false;
		cr_expect_eq(pick(&another), -1, "connect %d", i + 1);
		cr_expect(another);
		peercache_set_session(d(), 3, 1003); /* the same process again */
	}
	bool another = true;
	cr_expect_eq(pick(&another), 3, "after %d rendezvous the session is used", PEERCACHE_PROBES);
}

Test(peercache, connections_are_spread_over_the_processes_found)
{
	peercache_set_session(d(), 3, 1003);
	peercache_set_session(d(), 5, 1005);
	peercache_set_session(d(), 3, 1003);
	unsigned used[8] = {0}, probes = 0;
	for (int i = 0; i < 8 * PEERCACHE_REPROBE_MANY; i++) {
		bool another = false;
		int s = pick(&another);
		if (s < 0) {
			cr_assert(another);
			probes++;
			continue;
		}
		cr_assert(s == 3 || s == 5, "session %d", s);
		used[s]++;
	}
	cr_expect_gt(used[3], 0);
	cr_expect_eq(used[3], used[5], "%u and %u connections", used[3], used[5]);
	cr_expect_eq(probes, 8, "one rendezvous in %d", PEERCACHE_REPROBE_MANY);
}

Test(peercache, one_process_alone_is_looked_past_rarely)
{
	for (int i = 0; i < PEERCACHE_PROBES; i++)
		peercache_set_session(d(), 3, 1003);
	unsigned probes = 0;
	for (int i = 0; i < 2 * PEERCACHE_REPROBE_ONE; i++) {
		bool another = false;
		if (pick(&another) < 0)
			probes++;
	}
	cr_expect_eq(probes, 2);
}

Test(peercache, a_dropped_session_is_not_handed_out)
{
	for (int i = 0; i < PEERCACHE_PROBES; i++)
		peercache_set_session(d(), 3 + 2 * (i % 2), 1003 + 2 * (i % 2));
	peercache_drop_session(d(), 3);
	for (int i = 0; i < 3 * PEERCACHE_REPROBE_ONE; i++) {
		bool another = false;
		int s = pick(&another);
		cr_assert(s == -1 || s == 5, "session %d", s);
	}
	peercache_drop_session(d(), 5);
	bool another = true;
	cr_expect_eq(pick(&another), -1);
	cr_expect_not(another, "none left: a plain rendezvous");
}

Test(peercache, the_places_are_bounded)
{
	for (int i = 0; i < 3 * PEERCACHE_HOLDERS; i++)
		peercache_set_session(d(), i, 1000u + (unsigned)i);
	unsigned seen[3 * PEERCACHE_HOLDERS] = {0}, distinct = 0;
	for (int i = 0; i < 8 * PEERCACHE_REPROBE_MANY; i++) {
		bool another;
		int s = pick(&another);
		if (s >= 0 && seen[s]++ == 0)
			distinct++;
	}
	cr_expect_eq(distinct, PEERCACHE_HOLDERS);
}

Test(peercache, the_next_session_comes_in_turn_without_asking_again)
{
	uint64_t tok;
	cr_expect_eq(peercache_next(d(), &tok), -1, "none known");
	peercache_set_session(d(), 3, 1003);
	peercache_set_session(d(), 5, 1005);
	unsigned used[8] = {0};
	for (int i = 0; i < 10; i++) {
		int s = peercache_next(d(), &tok);
		cr_assert(s == 3 || s == 5, "session %d", s);
		cr_assert_eq(tok, 1000u + (unsigned)s);
		used[s]++;
	}
	cr_expect_eq(used[3], 5);
	cr_expect_eq(used[5], 5);
}

Test(peercache, a_burst_of_connects_asks_no_more_than_the_first_few)
{
	peercache_set_session(d(), 3, 1003);
	unsigned asked = 0;
	for (int i = 0; i < 50; i++) {
		bool another = false;
		int s = pick(&another);
		if (s < 0) {
			cr_assert(another);
			asked++;
		} else {
			cr_assert_eq(s, 3);
		}
	}
	/* None of the looks has answered yet: 50 connects at once (a load
	 * generator's start) must not make 50 handshakes. */
	cr_expect_eq(asked, PEERCACHE_PROBES - 1, "%u looks for 50 connects", asked);
}

/* A reset (a fork child's) forgets what was written before it, in every
 * table, however many resets found nothing to clear in between. */
Test(peercache, a_reset_after_use_forgets_every_entry)
{
	peercache_reset(); /* nothing written yet: nothing to clear */
	peercache_set_plain(d(), 1);
	peercache_set_session(d(), 3, 1003);
	cr_assert(peercache_is_plain(d(), 2));
	peercache_reset();
	cr_expect_not(peercache_is_plain(d(), 2), "the plain mark outlived the reset");
	bool another = false;
	cr_expect_eq(pick(&another), -1, "a session outlived the reset");
	peercache_set_plain(d(), 3);
	peercache_reset();
	cr_expect_not(peercache_is_plain(d(), 4), "a mark made after an earlier reset outlived this one");
}
