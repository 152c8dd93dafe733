/*
 * The nic's notification fd in epoll instances: an application's instance,
 * and each thread's own (wait_block). Adding and removing it around every
 * sleep cost two system calls per sleep, so a few instances keep it
 * between sleeps; past those places it is there only while a thread sleeps
 * (every packet runs the wake-up callback of each instance that holds it).
 * A sleep without the nic drops a kept one, a nic socket replaced behind
 * the same number is registered afresh, and a fork child's instances forget
 * the parent's sleepers, so a fresh ferry in the child (after daemon()) gets
 * its own nic's fd in. A sleeper the nic woke wakes nobody but the other
 * sleepers for what its loop finds. A spin that finds its events drops a
 * kept registration: a spinning thread does not sleep, and the fd would
 * only put a wake-up callback into every packet's path. A non-blocking
 * receive that finds nothing leaves an emptied nic unread unless it comes
 * again without a wait in between.
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "preload/epoll.h"
#include "preload/wait.h"
#include "transport/sys.h"
#include "preload_test_util.h"

/* The fake nic: an eventfd that arm hands out as the fd to sleep on. */
static int nic_fd = -1;

/* Event loop passes asked for: a sleep that the nic's fd ended asks one. */
static unsigned nic_runs;

static unsigned nic_run(void)
{
	__atomic_add_fetch(&nic_runs, 1, __ATOMIC_RELAXED);
	return 0;
}

static int nic_arm(void)
{
	return __atomic_load_n(&nic_fd, __ATOMIC_ACQUIRE);
}

static const struct wait_progress_ops nic_ops = {.run = nic_run, .arm = nic_arm};

static void use_nic(int fd)
{
	__atomic_store_n(&nic_fd, fd, __ATOMIC_RELEASE);
	wait_set_progress(&nic_ops, 0);
}

static void nic_init(void)
{
	test_table_init();
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	cr_assert_geq(fd, 0);
	use_nic(fd);
}

static void nic_fini(void)
{
	wait_set_progress(NULL, 0);
}

TestSuite(epoll_nic, .init = nic_init, .fini = nic_fini, .timeout = 30);

/* The inode of the file ep has registered under fd (its fdinfo says so), 0
 * if none. */
static unsigned long registered_ino(int ep, int fd)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", ep);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	unsigned long ino = 0;
	int tfd;
	while (!ino && fgets(line, sizeof(line), f)) {
		char *at = strstr(line, "ino:");
		if (sscanf(line, "tfd: %d", &tfd) == 1 && tfd == fd && at)
			ino = strtoul(at + 4, NULL, 16);
	}
	fclose(f);
	return ino;
}

static bool registered(int ep, int fd)
{
	return registered_ino(ep, fd) != 0;
}

static unsigned long ino_of(int fd)
{
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	return (unsigned long)st.st_ino;
}

/* Waits (5 s at most) until registered(ep, fd) is want. */
static bool becomes(int ep, int fd, bool want)
{
	for (int i = 0; i < 5000; i++) {
		if (registered(ep, fd) == want)
			return true;
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	return false;
}

struct sleeper {
	int ep;
	pthread_t th;
	int got;
};

static void *sleep_on(void *arg)
{
	struct sleeper *s = arg;
	struct epoll_event ev;
	s->got = epoll_wait(s->ep, &ev, 1, -1);
	return NULL;
}

/* An instance ferry manages, with a ferry file in it. */
static int ferry_instance(struct ffile **file)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), fd;
	cr_assert_geq(ep, 0);
	*file = test_file(&fd);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
	return ep;
}

/* One sleep on ep by another thread, ended by a notification on f. */
static void sleep_once(int ep, struct ffile *f)
{
	struct sleeper s = {.ep = ep};
	cr_assert_eq(pthread_create(&s.th, NULL, sleep_on, &s), 0);
	cr_assert(becomes(ep, nic_fd, true), "a sleeper brings the nic's fd in");
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(pthread_join(s.th, NULL), 0);
	cr_assert_eq(s.got, 1);
	ffile_notify(f, 0, 0);
}

Test(epoll_nic, an_instance_keeps_the_nic_fd_between_sleeps)
{
	struct ffile *f;
	int ep = ferry_instance(&f);
	cr_assert_not(registered(ep, nic_fd), "nobody slept yet");
	sleep_once(ep, f);
	cr_expect(registered(ep, nic_fd), "the nic's fd stays after the sleeper woke");
	sleep_once(ep, f);
	cr_expect(registered(ep, nic_fd));
}

Test(epoll_nic, past_the_kept_places_the_nic_fd_is_in_only_while_a_thread_sleeps)
{
	unsigned taken = 0;
	while (wait_nic_keep())
		taken++;
	cr_assert_gt(taken, 0, "some places to keep the nic's fd in");
	cr_assert_lt(taken, 64, "a bounded number of them");
	struct ffile *f;
	int ep = ferry_instance(&f);
	sleep_once(ep, f);
	cr_expect_not(registered(ep, nic_fd), "the sleeper takes it out as it wakes");
	wait_nic_unkeep();
	sleep_once(ep, f);
	cr_expect(registered(ep, nic_fd), "a place given back is taken by the next sleep");
	while (--taken)
		wait_nic_unkeep();
}

static int no_arm(void)
{
	return -1;
}

static const struct wait_progress_ops unarmed_ops = {.run = nic_run, .arm = no_arm};

Test(epoll_nic, a_sleep_without_the_nic_drops_a_kept_nic_fd)
{
	struct ffile *f;
	int ep = ferry_instance(&f);
	sleep_once(ep, f);
	cr_assert(registered(ep, nic_fd));
	/* Not armed (another thread holds the loop and does not let go): its
	 * packets must not end the sleep. */
	wait_set_progress(&unarmed_ops, 0);
	struct epoll_event ev;
	cr_assert_eq(epoll_wait(ep, &ev, 1, 10), 0);
	cr_expect_not(registered(ep, nic_fd));
}

Test(epoll_nic, a_nic_socket_replaced_behind_its_number_is_registered_afresh)
{
	struct ffile *f;
	int ep = ferry_instance(&f);
	sleep_once(ep, f);
	cr_assert_eq(registered_ino(ep, nic_fd), ino_of(nic_fd));
	/* As the nic's widening does: another socket, the same number. */
	int other = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	cr_assert_geq(other, 0);
	cr_assert_eq(dup3(other, nic_fd, O_CLOEXEC), nic_fd);
	close(other);
	wait_nic_replaced();
	sleep_once(ep, f);
	cr_expect_eq(registered_ino(ep, nic_fd), ino_of(nic_fd),
		     "the sleep registered the socket now behind the number");
}

Test(epoll_nic, a_threads_own_epoll_keeps_the_nic_fd)
{
	struct waiter *w = wait_self();
	cr_assert_not_null(w);
	struct timespec ms = {0, 1000000};
	cr_assert_geq(wait_block(w, NULL, 0, &ms, NULL), 0);
	cr_assert_geq(w->epfd, 0);
	cr_expect(registered(w->epfd, nic_fd), "kept after the sleep");
	/* A packet that is waiting ends the sleep. */
	uint64_t one = 1;
	cr_assert_eq(write(nic_fd, &one, sizeof(one)), (ssize_t)sizeof(one));
	/* (A sleep that missed it would last until the suite's timeout.) */
	cr_assert_geq(wait_block(w, NULL, 0, NULL, NULL), 0);
	uint64_t v;
	cr_assert_eq(read(nic_fd, &v, sizeof(v)), (ssize_t)sizeof(v));
	/* A packet that came and was taken while the thread was awake does
	 * not end its next sleep. */
	cr_assert_eq(write(nic_fd, &one, sizeof(one)), (ssize_t)sizeof(one));
	cr_assert_eq(read(nic_fd, &v, sizeof(v)), (ssize_t)sizeof(v));
	__atomic_store_n(&nic_runs, 0, __ATOMIC_RELAXED);
	cr_assert_geq(wait_block(w, NULL, 0, &ms, NULL), 0);
	cr_expect_eq(__atomic_load_n(&nic_runs, __ATOMIC_RELAXED), 0,
		     "the sleep ran its full time, no packet behind it");
	wait_set_progress(&unarmed_ops, 0);
	cr_assert_geq(wait_block(w, NULL, 0, &ms, NULL), 0);
	cr_expect_not(registered(w->epfd, nic_fd), "a sleep without the nic dropped it");
}

/* Waits (5 s at most) until wait_nic_sleeping() is want. */
static bool nic_sleeping_becomes(bool want)
{
	for (int i = 0; i < 5000; i++) {
		if (wait_nic_sleeping() == want)
			return true;
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	return false;
}

Test(epoll_nic, a_fork_child_forgets_the_parents_sleepers)
{
	struct ffile *f;
	int ep = ferry_instance(&f);
	struct sleeper s = {.ep = ep};
	cr_assert_eq(pthread_create(&s.th, NULL, sleep_on, &s), 0);
	cr_assert(becomes(ep, nic_fd, true));
	cr_assert(nic_sleeping_becomes(true));
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* As fork.c does; then a fresh ferry, with a nic of its own. */
		struct ffile *ef = fdtable_get(&fdtab, ep);
		epoll_fork_child(ef);
		ffile_put(&fdtab, ef);
		wait_fork_child();
		/* The parent's sleeper is not here to stand in for ticks. */
		if (wait_nic_sleeping())
			_exit(2);
		int fresh = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		use_nic(fresh);
		struct sleeper c = {.ep = ep};
		pthread_create(&c.th, NULL, sleep_on, &c);
		_exit(becomes(ep, fresh, true) ? 0 : 1);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 2,
		  "the child counts the parent's sleeper as asleep on its nic");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the child's sleeper brought the child's nic's fd in");
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(pthread_join(s.th, NULL), 0);
}

/* Writes the library makes, through its table of system calls. */
static unsigned lib_writes;
static ssize_t (*real_write)(int, const void *, size_t);

static ssize_t counting_write(int fd, const void *buf, size_t len)
{
	__atomic_add_fetch(&lib_writes, 1, __ATOMIC_RELAXED);
	return real_write(fd, buf, len);
}

/* The file a packet is for: the loop makes it readable when the fake nic
 * has something. */
static struct ffile *packet_file;

static unsigned packet_run(void)
{
	uint64_t v;
	if (read(nic_fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		return 0;
	ffile_notify(packet_file, EPOLLIN, EPOLLIN);
	return 1;
}

static const struct wait_progress_ops packet_ops = {.run = packet_run, .arm = nic_arm};

/* Waits (5 s at most) until thread tid sleeps in epoll_pwait. */
static bool in_epoll_pwait(pid_t tid)
{
	char path[64], buf[64];
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	for (int i = 0; i < 5000; i++) {
		FILE *f = fopen(path, "r");
		cr_assert_not_null(f);
		bool sleeping = fgets(buf, sizeof(buf), f) && atoi(buf) == SYS_epoll_pwait;
		fclose(f);
		if (sleeping)
			return true;
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	return false;
}

struct tid_sleeper {
	struct sleeper s;
	pid_t tid;
};

static void *tid_sleep_on(void *arg)
{
	struct tid_sleeper *t = arg;
	__atomic_store_n(&t->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	return sleep_on(&t->s);
}

Test(epoll_nic, a_sleeper_woken_by_the_nic_does_not_wake_itself)
{
	int ep = ferry_instance(&packet_file);
	wait_set_progress(&packet_ops, 0);
	real_write = sys_table.write;
	sys_table.write = counting_write;
	struct tid_sleeper t = {.s = {.ep = ep}};
	cr_assert_eq(pthread_create(&t.s.th, NULL, tid_sleep_on, &t), 0);
	pid_t tid;
	while (!(tid = __atomic_load_n(&t.tid, __ATOMIC_ACQUIRE)))
		sched_yield();
	cr_assert(in_epoll_pwait(tid), "the sleeper went to sleep");
	/* Not write(): the library's own, which would count. */
	cr_assert_eq(eventfd_write(nic_fd, 1), 0);
	cr_assert_eq(pthread_join(t.s.th, NULL), 0);
	sys_table.write = real_write;
	cr_assert_eq(t.s.got, 1, "the packet's file reported");
	cr_expect_eq(__atomic_load_n(&lib_writes, __ATOMIC_RELAXED), 0,
		     "%u writes to wake-up fds with nobody else asleep", lib_writes);
}

static const struct wait_progress_ops spin_ops = {.run = packet_run, .arm = nic_arm};

Test(epoll_nic, a_spin_that_finds_its_event_drops_the_kept_nic_fd)
{
	int ep = ferry_instance(&packet_file);
	sleep_once(ep, packet_file);
	cr_assert(registered(ep, nic_fd), "kept after a sleep");
	/* The loop's first pass in the spin brings the event in. */
	cr_assert_eq(eventfd_write(nic_fd, 1), 0);
	wait_set_progress(&spin_ops, 1000000);
	struct epoll_event ev;
	cr_assert_eq(epoll_wait(ep, &ev, 1, -1), 1);
	cr_expect_not(registered(ep, nic_fd), "dropped by the spin that found it");

	struct waiter *w = wait_self();
	wait_set_progress(&nic_ops, 0);
	struct timespec ms = {0, 1000000};
	cr_assert_geq(wait_block(w, NULL, 0, &ms, NULL), 0);
	cr_assert(registered(w->epfd, nic_fd), "the thread's own epoll keeps it after a sleep");
	wait_spin_outcome(true);
	cr_expect_not(registered(w->epfd, nic_fd), "and drops it when a spin finds its event");
}

struct own_sleeper {
	pthread_t th;
	int got;
};

static void *own_sleep(void *arg)
{
	struct own_sleeper *s = arg;
	s->got = wait_block(wait_self(), NULL, 0, NULL, NULL);
	return NULL;
}

/* The progress thread skips its ticks while an application thread sleeps on
 * the nic (packets wake that thread, which runs the loop): such a sleep, in
 * an application's epoll or in a thread's own, says so while it lasts, and
 * a sleep without the nic does not. */
Test(epoll_nic, a_sleep_on_the_nic_says_so_while_it_lasts)
{
	cr_assert_not(wait_nic_sleeping());
	struct ffile *f;
	int ep = ferry_instance(&f);
	struct sleeper s = {.ep = ep};
	cr_assert_eq(pthread_create(&s.th, NULL, sleep_on, &s), 0);
	cr_assert(nic_sleeping_becomes(true), "an epoll sleep on the nic did not say so");
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(pthread_join(s.th, NULL), 0);
	cr_assert_eq(s.got, 1);
	cr_assert_not(wait_nic_sleeping(), "still said after the sleep");
	ffile_notify(f, 0, 0);

	struct own_sleeper o = {0};
	cr_assert_eq(pthread_create(&o.th, NULL, own_sleep, &o), 0);
	cr_assert(nic_sleeping_becomes(true), "a sleep in a thread's own epoll did not say so");
	uint64_t one = 1, v;
	cr_assert_eq(write(nic_fd, &one, sizeof(one)), (ssize_t)sizeof(one));
	cr_assert_eq(pthread_join(o.th, NULL), 0);
	cr_assert_geq(o.got, 0);
	cr_assert_eq(read(nic_fd, &v, sizeof(v)), (ssize_t)sizeof(v));
	cr_assert_not(wait_nic_sleeping(), "still said after the sleep");

	wait_set_progress(&unarmed_ops, 0);
	struct sleeper u = {.ep = ep};
	cr_assert_eq(pthread_create(&u.th, NULL, sleep_on, &u), 0);
	nanosleep(&(struct timespec){0, 50000000}, NULL);
	cr_expect_not(wait_nic_sleeping(), "a sleep without the nic said it was on it");
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(pthread_join(u.th, NULL), 0);
	close(ep);
}

/* What the fake nic says of its last look (wait_progress_ops.rx_drained). */
static bool nic_was_drained;

static bool nic_drained(void)
{
	return __atomic_load_n(&nic_was_drained, __ATOMIC_RELAXED);
}

static const struct wait_progress_ops drained_ops = {
	.run = nic_run, .arm = nic_arm, .rx_drained = nic_drained};

/* Wake-ups from the nic's fd said to the nic, and passes run after one. */
static unsigned notices, passes_after_notice;

static void nic_noticed(void)
{
	__atomic_add_fetch(&notices, 1, __ATOMIC_RELAXED);
}

static unsigned nic_run_after_notice(void)
{
	if (__atomic_load_n(&notices, __ATOMIC_RELAXED))
		__atomic_add_fetch(&passes_after_notice, 1, __ATOMIC_RELAXED);
	return nic_run();
}

static const struct wait_progress_ops noticing_ops = {
	.run = nic_run_after_notice, .arm = nic_arm, .rx_drained = nic_drained,
	.rx_notified = nic_noticed};

/* Passes of the loop an epoll_wait with nothing ready runs before it
 * sleeps (without spinning), the nic's last look having found it empty or
 * not. */
static unsigned passes_before_sleep(bool drained)
{
	__atomic_store_n(&nic_was_drained, drained, __ATOMIC_RELAXED);
	wait_set_progress(&drained_ops, 0);
	struct ffile *f;
	int ep = ferry_instance(&f);
	unsigned before = __atomic_load_n(&nic_runs, __ATOMIC_RELAXED);
	struct sleeper s = {.ep = ep};
	cr_assert_eq(pthread_create(&s.th, NULL, sleep_on, &s), 0);
	cr_assert(nic_sleeping_becomes(true), "the epoll_wait did not sleep on the nic");
	unsigned passes = __atomic_load_n(&nic_runs, __ATOMIC_RELAXED) - before;
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(pthread_join(s.th, NULL), 0);
	cr_assert_eq(s.got, 1);
	close(ep);
	return passes;
}

/* A look at the nic right before a sleep on its fd is a system call that
 * finds nothing when the last look emptied it: whatever came since wakes
 * the sleep at once. pgbench -S -c 8 over udp made one per query. */
Test(epoll_nic, no_look_at_an_emptied_nic_before_a_sleep_on_it)
{
	cr_expect_eq(passes_before_sleep(true), 0, "a look at a nic found empty before sleeping");
	cr_expect_eq(passes_before_sleep(false), 1,
		     "no look at a nic that may hold packets before sleeping");
}

/* A sleeper the nic's fd woke says so before it runs the loop: if that run
 * finds the loop busy, the packet stays queued while the nic's last look
 * still says empty, and the next wait must look rather than sleep on an
 * edge already taken. */
Test(epoll_nic, a_wake_up_from_the_nic_is_said_before_its_pass)
{
	__atomic_store_n(&nic_was_drained, true, __ATOMIC_RELAXED);
	wait_set_progress(&noticing_ops, 0);
	struct ffile *f;
	int ep = ferry_instance(&f);
	struct sleeper s = {.ep = ep};
	cr_assert_eq(pthread_create(&s.th, NULL, sleep_on, &s), 0);
	cr_assert(nic_sleeping_becomes(true));
	uint64_t one = 1, v;
	cr_assert_eq(write(nic_fd, &one, sizeof(one)), (ssize_t)sizeof(one));
	for (int i = 0; i < 5000 && !__atomic_load_n(&passes_after_notice, __ATOMIC_RELAXED); i++)
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	cr_expect_gt(__atomic_load_n(&notices, __ATOMIC_RELAXED), 0, "the wake-up was not said");
	cr_expect_gt(__atomic_load_n(&passes_after_notice, __ATOMIC_RELAXED), 0,
		     "no pass ran after the wake-up was said");
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(pthread_join(s.th, NULL), 0);
	cr_assert_eq(s.got, 1);
	cr_assert_eq(read(nic_fd, &v, sizeof(v)), (ssize_t)sizeof(v));
	close(ep);
}

/* A non-blocking receive that finds its stream empty is followed, in an
 * event loop, by a wait that looks at the nic or sleeps on it: its own
 * look would be a system call that finds nothing. A thread that tries
 * again without a wait in between looks: nobody may be about to. */
Test(epoll_nic, a_receive_that_finds_nothing_looks_only_if_no_wait_follows)
{
	__atomic_store_n(&nic_was_drained, true, __ATOMIC_RELAXED);
	wait_set_progress(&drained_ops, 0);
	wait_flush();
	cr_expect(wait_miss_skips_look(), "a miss at an emptied nic looked");
	cr_expect_not(wait_miss_skips_look(), "a second miss without a wait in between did not look");
	cr_expect_not(wait_miss_skips_look(), "a third miss without a wait did not look");
	wait_flush(); /* a wait */
	cr_expect(wait_miss_skips_look(), "the first miss after a wait looked");
	wait_flush();
	__atomic_store_n(&nic_was_drained, false, __ATOMIC_RELAXED);
	cr_expect_not(wait_miss_skips_look(), "a miss at a nic that may hold packets did not look");
}

/* An arm that finds packets waiting runs the loop for them itself, under
 * the lock it took, and says so (-EAGAIN): the waiter looks for their
 * events and runs no pass of its own, so a thread woken for a packet takes
 * the endpoint lock once. */
static unsigned arms_that_ran;

static int arm_running_waiting(void)
{
	uint64_t v;
	if (read(nic_fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		return nic_fd;
	__atomic_add_fetch(&arms_that_ran, 1, __ATOMIC_RELAXED);
	ffile_notify(packet_file, EPOLLIN, EPOLLIN);
	return -EAGAIN;
}

static const struct wait_progress_ops arm_runs_ops = {
	.run = nic_run, .arm = arm_running_waiting, .rx_drained = nic_drained};

static void arm_finds_a_packet(void)
{
	__atomic_store_n(&nic_was_drained, true, __ATOMIC_RELAXED);
	wait_set_progress(&arm_runs_ops, 0);
	arms_that_ran = 0;
	cr_assert_eq(eventfd_write(nic_fd, 1), 0);
}

Test(epoll_nic, an_arm_that_ran_the_loop_is_not_followed_by_a_pass)
{
	int ep = ferry_instance(&packet_file);
	arm_finds_a_packet();
	unsigned before = __atomic_load_n(&nic_runs, __ATOMIC_RELAXED);
	struct epoll_event ev;
	cr_assert_eq(epoll_wait(ep, &ev, 1, 5000), 1, "the packet's event came back");
	cr_assert_eq(arms_that_ran, 1);
	cr_assert_eq(__atomic_load_n(&nic_runs, __ATOMIC_RELAXED), before,
		     "a pass ran after the arm that handled the packet");
	close(ep);
}

Test(epoll_nic, a_poll_whose_arm_ran_the_loop_runs_no_pass)
{
	int fd;
	packet_file = test_file(&fd);
	arm_finds_a_packet();
	unsigned before = __atomic_load_n(&nic_runs, __ATOMIC_RELAXED);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	cr_assert_eq(poll(&p, 1, 5000), 1, "the packet's event came back");
	cr_assert(p.revents & POLLIN);
	cr_assert_eq(arms_that_ran, 1);
	cr_assert_eq(__atomic_load_n(&nic_runs, __ATOMIC_RELAXED), before,
		     "a pass ran after the arm that handled the packet");
}
