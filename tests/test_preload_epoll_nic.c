/*
 * The nic's notification fd in an application's epoll instance: there only
 * while a thread sleeps on the instance (every packet would otherwise run the
 * instance's wake-up callback inside the sender's system call), and a fork
 * child's instances forget the parent's sleepers, so a fresh ferry in the
 * child (after daemon()) gets its own nic's fd in.
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "preload/epoll.h"
#include "preload/wait.h"
#include "preload_test_util.h"

/* The fake nic: an eventfd that arm hands out as the fd to sleep on. */
static int nic_fd = -1;

static unsigned nic_run(void)
{
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

/* Whether the kernel instance ep has fd registered (its fdinfo says so). */
static bool registered(int ep, int fd)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", ep);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	bool found = false;
	int tfd;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "tfd: %d", &tfd) == 1 && tfd == fd;
	fclose(f);
	return found;
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

Test(epoll_nic, the_nic_fd_is_in_an_instance_only_while_a_thread_sleeps)
{
	struct ffile *f;
	int ep = ferry_instance(&f);
	cr_assert_not(registered(ep, nic_fd), "nobody sleeps yet");
	struct sleeper s = {.ep = ep};
	cr_assert_eq(pthread_create(&s.th, NULL, sleep_on, &s), 0);
	cr_assert(becomes(ep, nic_fd, true), "a sleeper brings the nic's fd in");
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(pthread_join(s.th, NULL), 0);
	cr_assert_eq(s.got, 1);
	cr_assert_not(registered(ep, nic_fd), "the sleeper takes it out as it wakes");
}

Test(epoll_nic, a_fork_child_forgets_the_parents_sleepers)
{
	struct ffile *f;
	int ep = ferry_instance(&f);
	struct sleeper s = {.ep = ep};
	cr_assert_eq(pthread_create(&s.th, NULL, sleep_on, &s), 0);
	cr_assert(becomes(ep, nic_fd, true));
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* As fork.c does; then a fresh ferry, with a nic of its own. */
		struct ffile *ef = fdtable_get(&fdtab, ep);
		epoll_fork_child(ef);
		ffile_put(&fdtab, ef);
		int fresh = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		use_nic(fresh);
		struct sleeper c = {.ep = ep};
		pthread_create(&c.th, NULL, sleep_on, &c);
		_exit(becomes(ep, fresh, true) ? 0 : 1);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the child's sleeper brought the child's nic's fd in");
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(pthread_join(s.th, NULL), 0);
}
