/*
 * Waits while another thread holds the endpoint and does not let go (the
 * exit drain, a fork, a thread stopped in a debugger): the waiter sleeps in
 * the kernel after a few looks, so its kernel fds are seen and a signal
 * interrupts it, as the kernel's poll and epoll_wait do.
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "preload/wait.h"
#include "preload_test_util.h"

/* Another thread runs the event loop for as long as this is set. */
static int held;
static int arms_busy;

static unsigned busy_run(void)
{
	return 0;
}

static int busy_arm(void)
{
	if (!__atomic_load_n(&held, __ATOMIC_ACQUIRE))
		return -1;
	__atomic_add_fetch(&arms_busy, 1, __ATOMIC_RELAXED);
	return -EBUSY;
}

static const struct wait_progress_ops busy_ops = {.run = busy_run, .arm = busy_arm};

static void busy_init(void)
{
	test_table_init();
	__atomic_store_n(&held, 1, __ATOMIC_RELEASE);
	arms_busy = 0;
	wait_set_progress(&busy_ops, 0);
}

static void busy_fini(void)
{
	wait_set_progress(NULL, 0);
}

TestSuite(wait_busy, .init = busy_init, .fini = busy_fini, .timeout = 20);

Test(wait_busy, poll_reports_a_ready_kernel_fd)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(write(p[1], "x", 1), 1);
	int fd;
	test_file(&fd);
	struct pollfd fds[2] = {{.fd = fd, .events = POLLIN}, {.fd = p[0], .events = POLLIN}};
	cr_assert_eq(poll(fds, 2, -1), 1);
	cr_assert_eq(fds[0].revents, 0);
	cr_assert_eq(fds[1].revents, POLLIN);
	cr_assert_gt(arms_busy, 0, "the wait met a busy endpoint");
	close(fd);
	close(p[0]);
	close(p[1]);
}

Test(wait_busy, epoll_reports_a_ready_kernel_fd)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	int ep = epoll_create1(EPOLL_CLOEXEC), fd;
	test_file(&fd);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
	ev.data.fd = p[0];
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev), 0);
	cr_assert_eq(write(p[1], "x", 1), 1);
	struct epoll_event out[2];
	cr_assert_eq(epoll_wait(ep, out, 2, -1), 1);
	cr_assert_eq(out[0].data.fd, p[0]);
	cr_assert_gt(arms_busy, 0, "the wait met a busy endpoint");
	close(fd);
	close(ep);
	close(p[0]);
	close(p[1]);
}

static void on_usr1(int sig)
{
	(void)sig;
}

struct kicker {
	pthread_t target;
	int done;
};

/* Signals the target until it has returned: a signal handled while the
 * waiter is not in the kernel cannot interrupt it, a later one must. */
static void *kick(void *arg)
{
	struct kicker *k = arg;
	while (!__atomic_load_n(&k->done, __ATOMIC_ACQUIRE)) {
		pthread_kill(k->target, SIGUSR1);
		usleep(2000);
	}
	return NULL;
}

static void interrupted(int (*wait_fn)(int fd))
{
	struct sigaction sa = {.sa_handler = on_usr1}; /* no SA_RESTART */
	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	int fd;
	test_file(&fd);
	struct kicker k = {.target = pthread_self()};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, kick, &k), 0);
	int rc = wait_fn(fd);
	int err = errno;
	__atomic_store_n(&k.done, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	cr_assert_eq(rc, -1);
	cr_assert_eq(err, EINTR);
	close(fd);
}

static int epoll_forever(int fd)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
	struct epoll_event out;
	int rc = epoll_wait(ep, &out, 1, -1);
	int err = errno;
	close(ep);
	errno = err;
	return rc;
}

static int poll_forever(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, -1);
}

Test(wait_busy, a_signal_interrupts_epoll_wait)
{
	interrupted(epoll_forever);
}

Test(wait_busy, a_signal_interrupts_poll)
{
	interrupted(poll_forever);
}
