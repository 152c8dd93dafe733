/*
 * Adaptive spinning: a thread whose spins keep running out stops spinning
 * (apart from a probe now and then) and sleeps at once, and one spin that
 * finds its event brings spinning back. On an oversubscribed host a spin
 * that cannot succeed only takes the CPU its peer needs.
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "preload/fdtable.h"
#include "preload/wait.h"
#include "transport/clock.h"
#include "preload_test_util.h"

/* sched_yield as wait.c calls it, counted; for real unless a test says not
 * (then it finds nobody to run, as on an idle CPU, deterministically). */
static unsigned yields;
static bool yield_for_real = true;

int sched_yield(void)
{
	__atomic_add_fetch(&yields, 1, __ATOMIC_RELAXED);
	return yield_for_real ? (int)syscall(SYS_sched_yield) : 0;
}

/* Event loop passes: each turn of a spin makes one. */
static unsigned runs;

/* How long a pass takes, where a test makes it take long (a udp pass is a
 * system call or two). */
static uint64_t pass_ns;
/* The next pass finds the event (a spin's last). */
static bool find_now;

static unsigned count_run(void)
{
	__atomic_add_fetch(&runs, 1, __ATOMIC_RELAXED);
	if (find_now) {
		find_now = false;
		return 1;
	}
	for (uint64_t end = pass_ns ? clock_now_ns() + pass_ns : 0; clock_now_ns() < end;)
		;
	return 0;
}

static int no_arm(void)
{
	return -1;
}

static const struct wait_progress_ops count_ops = {.run = count_run, .arm = no_arm};

/* Long enough that a spin turns many times even under valgrind. */
#define SPIN_US 2000

static void spin_init(void)
{
	test_table_init();
	wait_set_progress(&count_ops, SPIN_US);
	/* Whatever earlier waits on this thread left: one found event. */
	wait_spin_outcome(true);
}

static void spin_fini(void)
{
	wait_set_progress(NULL, 0);
}

TestSuite(wait_spin, .init = spin_init, .fini = spin_fini, .timeout = 20);

Test(wait_spin, misses_in_a_row_stop_the_spin_but_for_a_probe)
{
	cr_assert_eq(wait_spin_us(), SPIN_US);
	for (int i = 0; i < 4; i++)
		wait_spin_outcome(false);
	unsigned spun = 0, asked = 32;
	for (unsigned i = 0; i < asked; i++)
		spun += wait_spin_us() != 0;
	cr_expect_eq(spun, asked / 16, "%u of %u waits spun after four misses", spun, asked);
	wait_spin_outcome(true);
	cr_expect_eq(wait_spin_us(), SPIN_US, "a spin that found its event brings spinning back");
}

Test(wait_spin, fewer_misses_keep_spinning)
{
	for (int i = 0; i < 3; i++)
		wait_spin_outcome(false);
	cr_expect_eq(wait_spin_us(), SPIN_US);
}

/* Through poll(): a file that never becomes ready makes each spin run out
 * (the timeout outlasts the spin); after four, a poll no longer spins. */
Test(wait_spin, poll_on_a_quiet_file_stops_spinning)
{
	int fd;
	test_file(&fd);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	unsigned per_poll[8];
	for (int i = 0; i < 8; i++) {
		unsigned before = __atomic_load_n(&runs, __ATOMIC_RELAXED);
		cr_assert_eq(poll(&p, 1, 2 * SPIN_US / 1000 + 2), 0);
		per_poll[i] = __atomic_load_n(&runs, __ATOMIC_RELAXED) - before;
	}
	close(fd);
	cr_expect_gt(per_poll[0], 2, "the first poll spun (%u passes)", per_poll[0]);
	for (int i = 4; i < 8; i++)
		cr_expect_lt(per_poll[i], 2, "poll %d after four spent spins still spun (%u passes)",
			     i, per_poll[i]);
}

/* A spin looks at the clock on every WAIT_SPIN_CLOCK_TURNS-th turn only: a
 * turn in between goes on even past the end, and the turn that looks stops
 * once the end has passed and not before. */
Test(wait_spin, the_clock_is_read_every_few_turns)
{
	uint64_t past = clock_now_ns() - 1, future = clock_now_ns() + 60ull * 1000000000ull;
	for (unsigned turn = 0; turn < 2 * WAIT_SPIN_CLOCK_TURNS; turn++) {
		bool looks = turn % WAIT_SPIN_CLOCK_TURNS == WAIT_SPIN_CLOCK_TURNS - 1;
		cr_expect_eq(wait_spin_over(turn, past), looks, "turn %u, end passed", turn);
		cr_expect(!wait_spin_over(turn, future), "turn %u, end ahead", turn);
	}
}

/* Through poll() with a short timeout inside the spin: the call still
 * returns, having turned at least once, whatever turn the clock is read on. */
Test(wait_spin, a_short_poll_timeout_ends_the_spin)
{
	int fd;
	test_file(&fd);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	unsigned before = __atomic_load_n(&runs, __ATOMIC_RELAXED);
	uint64_t t0 = clock_now_ns();
	cr_assert_eq(poll(&p, 1, 1), 0);
	uint64_t took = clock_now_ns() - t0;
	close(fd);
	cr_expect_geq(took, 1000000u, "poll returned before its 1 ms timeout");
	cr_expect_gt(__atomic_load_n(&runs, __ATOMIC_RELAXED) - before, 0, "the spin did not turn");
}

/* Runs on the test's CPU until told to stop: whoever yields that CPU lets it run. */
static bool hog_stop, hog_started;

static void *hog(void *arg)
{
	cpu_set_t *cpu = arg;
	pthread_setaffinity_np(pthread_self(), sizeof(*cpu), cpu);
	__atomic_store_n(&hog_started, true, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&hog_stop, __ATOMIC_RELAXED))
		;
	return NULL;
}

/* Four spins that each found their event after 64 idle turns (or spin_ns,
 * if longer), on this thread's CPU shared with a thread that never stops:
 * every sixteenth turn yields, and the hog, the CPU's favourite against this
 * thread made nice, runs then. (Criterion runs each test in a process of its
 * own: nothing to put back.) */
static void four_spins_beside_a_hog(uint64_t spin_ns)
{
	cpu_set_t mine, one;
	cr_assert_eq(pthread_getaffinity_np(pthread_self(), sizeof(mine), &mine), 0);
	CPU_ZERO(&one);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &mine)) {
			CPU_SET(c, &one);
			break;
		}
	cr_assert_eq(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
	cr_assert_eq(setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10), 0);
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, hog, &one), 0);
	while (!__atomic_load_n(&hog_started, __ATOMIC_ACQUIRE))
		sched_yield();
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(wait_spin_us(), SPIN_US);
		uint64_t end = clock_now_ns() + spin_ns;
		for (int t = 0; t < 64 || clock_now_ns() < end; t++)
			wait_spin_once();
		find_now = true;
		wait_spin_once();
		wait_spin_outcome(true);
	}
	__atomic_store_n(&hog_stop, true, __ATOMIC_RELAXED);
	cr_assert_eq(pthread_join(th, NULL), 0);
}

/* After spins that ceded the CPU, where that counts: a probe every 16th wait. */
static void expect_spins_stopped(void)
{
	unsigned spun = 0, asked = 32;
	for (unsigned i = 0; i < asked; i++)
		spun += wait_spin_us() != 0;
	cr_expect_eq(spun, asked / 16, "%u of %u waits spun after four spins that ceded the CPU",
		     spun, asked);
}

/* Where looks are system calls (udp), spins that found their event only
 * once their yields had let another thread run count as spent: on a short
 * CPU a spin is a sleep that costs the others their turns. */
Test(wait_spin, finding_the_event_after_ceding_the_cpu_stops_the_spin)
{
	wait_set_ceded_spins_spent(true);
	four_spins_beside_a_hog(0);
	expect_spins_stopped();
}

/* Where a look is a read of memory and a sleeper costs its peer a wake-up
 * call (softib), yielding is the cheaper sleep: such spins keep spinning. */
Test(wait_spin, over_shared_memory_ceding_spins_keep_spinning)
{
	wait_set_ceded_spins_spent(false);
	four_spins_beside_a_hog(0);
	cr_expect_eq(wait_spin_us(), SPIN_US);
}

/* Without anyone to yield to, a spin that finds its event keeps spinning. */
Test(wait_spin, finding_the_event_without_ceding_keeps_the_spin)
{
	wait_set_ceded_spins_spent(true);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(wait_spin_us(), SPIN_US);
		wait_spin_once();
		wait_spin_outcome(true);
	}
	cr_expect_eq(wait_spin_us(), SPIN_US);
}

/* A spin's yields that run nobody thin out: after four in a row the passes
 * between two yields double with each, up to 1024, where one every 16 passes
 * was a system call each time. 65,536 idle passes: 71 yields by the count,
 * and one per 8 us of spinning besides (the passes take a few ms), not
 * 4,096. */
Test(wait_spin, yields_that_run_nobody_thin_out)
{
	yield_for_real = false;
	unsigned before = __atomic_load_n(&yields, __ATOMIC_RELAXED);
	uint64_t t0 = clock_now_ns();
	for (unsigned i = 0; i < 16 * 4096; i++)
		wait_spin_once();
	uint64_t took = clock_now_ns() - t0;
	unsigned n = __atomic_load_n(&yields, __ATOMIC_RELAXED) - before;
	cr_expect_geq(n, 64, "%u yields: a long spin still yields now and then", n);
	cr_expect_leq(n, 100 + took / 8000, "%u yields in %u idle passes of %llu us", n, 16 * 4096,
		      (unsigned long long)(took / 1000));
	cr_expect_lt(n, 4096, "%u yields: one every 16 passes", n);
}

/* A quiet spell first, then the CPU shared: spins of 400 passes of 1 us
 * (udp's), each ending with its event found, still yield to the other
 * thread and count what that cost. The interval grown in the quiet spell
 * (1024 passes) outlasts every such spin: only the time since the last
 * yield brings one. */
Test(wait_spin, a_cpu_shared_after_a_quiet_spell_is_noticed)
{
	yield_for_real = false;
	for (unsigned i = 0; i < 16 * 4096; i++)
		wait_spin_once();
	yield_for_real = true;
	pass_ns = 1000;
	wait_set_ceded_spins_spent(true);
	four_spins_beside_a_hog(400000);
	expect_spins_stopped();
}

/* A spin's length adapts: from FERRY_SPIN_US up to WAIT_SPIN_GROW_US
 * (800 us) while its events keep coming just after it ran out on a CPU
 * nobody else wanted, back down when they come late. */
#define SHORT_SPIN_US 200

static void short_spin_init(void)
{
	test_table_init();
	wait_set_progress(&count_ops, SHORT_SPIN_US);
	wait_spin_outcome(true);
}

TestSuite(wait_spin_length, .init = short_spin_init, .fini = spin_fini, .timeout = 20);

/* A spin that ran out, then a wait that ended at once (the event was
 * there just after the spin gave up). */
static void ran_out_then_woke(uint64_t after_ns)
{
	wait_spin_outcome(false);
	struct timespec pause = {0, (long)after_ns};
	if (after_ns)
		nanosleep(&pause, NULL);
	struct timespec now = {0, 0};
	wait_block(NULL, NULL, 0, &now, NULL);
}

/* Grows the spin to its longest: a preempted try may not double it, so
 * a few more are allowed than the three doublings it takes. */
static void grow_to_the_longest(void)
{
	wait_spin_us();
	for (int i = 0; i < 20 && wait_spin_current_us() < 800; i++) {
		unsigned before = wait_spin_current_us();
		ran_out_then_woke(0);
		cr_assert_leq(wait_spin_current_us(), 2 * before, "at most doubled");
		wait_spin_outcome(true); /* not four misses in a row: it still spins */
	}
}

Test(wait_spin_length, a_spin_that_ran_out_just_short_of_its_event_grows)
{
	cr_assert_eq(wait_spin_us(), SHORT_SPIN_US);
	grow_to_the_longest();
	cr_expect_eq(wait_spin_current_us(), 800);
	cr_expect_eq(wait_spin_us(), 800);
	ran_out_then_woke(0);
	cr_expect_eq(wait_spin_current_us(), 800, "no longer than WAIT_SPIN_GROW_US");
}

Test(wait_spin_length, a_spin_whose_event_came_much_later_halves_back)
{
	grow_to_the_longest();
	cr_assert_eq(wait_spin_us(), 800);
	/* At most half: all the way back if the kernel took the CPU away
	 * meanwhile (a busy host). */
	ran_out_then_woke(4 * 800 * 1000ull + 1000000);
	cr_expect_leq(wait_spin_current_us(), 400);
	ran_out_then_woke(4 * 400 * 1000ull + 1000000);
	cr_expect_eq(wait_spin_current_us(), SHORT_SPIN_US);
	ran_out_then_woke(4 * SHORT_SPIN_US * 1000ull + 1000000);
	cr_expect_eq(wait_spin_current_us(), SHORT_SPIN_US, "never below FERRY_SPIN_US");
}

Test(wait_spin_length, a_spin_found_its_event_is_kept_as_it_is)
{
	grow_to_the_longest();
	wait_spin_us();
	wait_spin_outcome(true);
	struct timespec now = {0, 0};
	wait_block(NULL, NULL, 0, &now, NULL);
	cr_expect_eq(wait_spin_current_us(), 800, "only a spin that ran out changes it");
}
