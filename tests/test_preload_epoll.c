/* epoll, poll and select over ferry files: level and edge triggering,
 * one-shot, hang-up bits, kernel fds mixed in, one file in two sets, an
 * epoll inside another, and wake-ups from another thread. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#include "preload/epoll.h"
#include "preload_test_util.h"

TestSuite(epoll, .init = test_table_init, .timeout = 20);
TestSuite(poll, .init = test_table_init, .timeout = 20);
TestSuite(select, .init = test_table_init, .timeout = 20);

static void add(int ep, int fd, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.fd = fd};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0, "add %d: %s", fd, strerror(errno));
}

static int wait_n(int ep, struct epoll_event *ev, int max, int timeout)
{
	int n = epoll_wait(ep, ev, max, timeout);
	cr_assert_geq(n, 0, "epoll_wait: %s", strerror(errno));
	return n;
}

Test(epoll, level_triggered_reports_until_not_ready)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), fd;
	struct ffile *f = test_file(&fd);
	add(ep, fd, EPOLLIN);
	struct epoll_event ev[4];
	cr_assert_eq(wait_n(ep, ev, 4, 0), 0);
	ffile_notify(f, EPOLLIN, EPOLLIN);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(wait_n(ep, ev, 4, 0), 1);
		cr_assert_eq(ev[0].events, EPOLLIN);
		cr_assert_eq(ev[0].data.fd, fd);
	}
	ffile_notify(f, 0, 0);
	cr_assert_eq(wait_n(ep, ev, 4, 0), 0, "no longer ready, no longer reported");
	close(fd);
	close(ep);
}

Test(epoll, edge_triggered_reports_each_event_once)
{
	int ep = epoll_create1(0), fd;
	struct ffile *f = test_file(&fd);
	add(ep, fd, EPOLLIN | EPOLLET);
	struct epoll_event ev[4];
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4, 0), 1);
	cr_assert_eq(wait_n(ep, ev, 4, 0), 0, "still readable but no new edge");
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4, 0), 1, "new data is a new edge");
	ffile_notify(f, EPOLLIN | EPOLLOUT, EPOLLOUT);
	cr_assert_eq(wait_n(ep, ev, 4, 0), 0, "an edge on an event nobody asked for");
	close(fd);
	close(ep);
}

Test(epoll, oneshot_disarms_until_mod)
{
	int ep = epoll_create1(0), fd;
	struct ffile *f = test_file(&fd);
	add(ep, fd, EPOLLIN | EPOLLONESHOT);
	struct epoll_event ev[4];
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4, 0), 1);
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4, 0), 0, "disarmed");
	struct epoll_event mod = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 42};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &mod), 0);
	cr_assert_eq(wait_n(ep, ev, 4, 0), 1, "re-armed and still ready");
	cr_assert_eq(ev[0].data.u64, 42);
	close(fd);
	close(ep);
}

Test(epoll, errors_and_hangups_need_no_asking)
{
	int ep = epoll_create1(0), fd;
	struct ffile *f = test_file(&fd);
	add(ep, fd, EPOLLOUT | EPOLLRDHUP);
	struct epoll_event ev[4];
	ffile_notify(f, EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP, EPOLLERR | EPOLLHUP);
	cr_assert_eq(wait_n(ep, ev, 4, 0), 1);
	cr_assert_eq(ev[0].events, EPOLLRDHUP | EPOLLERR | EPOLLHUP, "IN not asked for, not given");
	close(fd);
	close(ep);
}

Test(epoll, ctl_errors_match_the_kernel)
{
	int ep = epoll_create1(0), fd;
	test_file(&fd);
	struct epoll_event ev = {.events = EPOLLIN};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev), -1);
	cr_assert_eq(errno, ENOENT);
	add(ep, fd, EPOLLIN);
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), -1);
	cr_assert_eq(errno, EEXIST);
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL), 0);
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL), -1);
	cr_assert_eq(errno, ENOENT);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(epoll_ctl(p[0], EPOLL_CTL_ADD, fd, &ev), -1, "not an epoll fd");
	cr_assert_eq(errno, EINVAL);
	struct epoll_event ex = {.events = EPOLLIN | EPOLLEXCLUSIVE};
	add(ep, fd, ex.events);
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ex), -1);
	cr_assert_eq(errno, EINVAL, "exclusive items cannot be modified");
	close(p[0]);
	close(p[1]);
	close(fd);
	close(ep);
}

Test(epoll, ferry_and_kernel_fds_together)
{
	int ep = epoll_create1(0), fd, p[2];
	struct ffile *f = test_file(&fd);
	cr_assert_eq(pipe(p), 0);
	add(ep, p[0], EPOLLIN);
	add(ep, fd, EPOLLIN);
	struct epoll_event ev[4];
	cr_assert_eq(write(p[1], "x", 1), 1);
	ffile_notify(f, EPOLLIN, EPOLLIN);
	/* While ferry has events the kernel is asked only every few calls (no
	 * system call when something is ready), so a busy ferry fd delays a
	 * kernel one by a few calls, never starves it. */
	bool saw_pipe = false, saw_ferry = false;
	for (int call = 0; call < 10 && !(saw_pipe && saw_ferry); call++) {
		int n = wait_n(ep, ev, 4, 1000);
		for (int i = 0; i < n; i++) {
			saw_pipe |= ev[i].data.fd == p[0];
			saw_ferry |= ev[i].data.fd == fd;
		}
	}
	cr_assert(saw_pipe && saw_ferry);
	close(p[0]);
	close(p[1]);
	close(fd);
	close(ep);
}

Test(epoll, one_file_in_two_sets)
{
	int e1 = epoll_create1(0), e2 = epoll_create1(0), fd;
	struct ffile *f = test_file(&fd);
	add(e1, fd, EPOLLIN);
	add(e2, fd, EPOLLIN | EPOLLET);
	struct epoll_event ev[2];
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(e1, ev, 2, 0), 1);
	cr_assert_eq(wait_n(e2, ev, 2, 0), 1);
	cr_assert_eq(wait_n(e1, ev, 2, 0), 1, "level-triggered set still reports");
	cr_assert_eq(wait_n(e2, ev, 2, 0), 0, "edge-triggered set does not");
	close(e1);
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(e2, ev, 2, 0), 1, "closing one set leaves the other");
	close(fd);
	close(e2);
}

Test(epoll, an_epoll_inside_a_kernel_epoll)
{
	int inner = epoll_create1(0), outer = epoll_create1(0), fd;
	struct ffile *f = test_file(&fd);
	add(inner, fd, EPOLLIN);
	add(outer, inner, EPOLLIN);
	struct epoll_event ev[2];
	cr_assert_eq(wait_n(outer, ev, 2, 0), 0);
	ffile_notify(f, EPOLLIN, EPOLLIN);
	/* The outer instance is the kernel's alone: it sees the inner one's
	 * placeholder become readable. */
	cr_assert_eq(wait_n(outer, ev, 2, 1000), 1);
	cr_assert_eq(ev[0].data.fd, inner);
	cr_assert_eq(wait_n(inner, ev, 2, 0), 1);
	cr_assert_eq(ev[0].data.fd, fd);
	ffile_notify(f, 0, 0);
	cr_assert_eq(wait_n(inner, ev, 2, 0), 0);
	cr_assert_eq(wait_n(outer, ev, 2, 0), 0, "drained once nothing is ready");
	close(fd);
	close(inner);
	close(outer);
}

Test(epoll, registrations_live_as_long_as_the_file)
{
	int ep = epoll_create1(0), fd;
	struct ffile *f = test_file(&fd);
	add(ep, fd, EPOLLIN);
	int d = dup(fd);
	close(fd);
	ffile_notify(f, EPOLLIN, EPOLLIN);
	struct epoll_event ev[2];
	cr_assert_eq(wait_n(ep, ev, 2, 0), 1, "the kernel quirk: a dup keeps the registration");
	cr_assert_eq(ev[0].data.fd, fd);
	close(d);
	cr_assert_eq(test_released, 1);
	cr_assert_eq(wait_n(ep, ev, 2, 0), 0, "gone with the last reference");
	close(ep);
}

struct notifier {
	struct ffile *f;
	uint32_t mask;
};

static void *notify_later(void *arg)
{
	struct notifier *n = arg;
	struct timespec ts = {0, 50 * 1000 * 1000};
	nanosleep(&ts, NULL);
	ffile_notify(n->f, n->mask, n->mask);
	return NULL;
}

Test(epoll, a_sleeper_wakes_on_an_event_from_another_thread)
{
	int ep = epoll_create1(0), fd;
	struct ffile *f = test_file(&fd);
	add(ep, fd, EPOLLIN);
	struct notifier n = {f, EPOLLIN};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, notify_later, &n), 0);
	struct epoll_event ev[2];
	cr_assert_eq(wait_n(ep, ev, 2, -1), 1, "woken, not timed out (no timeout given)");
	pthread_join(th, NULL);
	close(fd);
	close(ep);
}

Test(epoll, exclusive_sleepers_get_the_event)
{
	int ep = epoll_create1(0), fd;
	struct ffile *f = test_file(&fd);
	add(ep, fd, EPOLLIN | EPOLLEXCLUSIVE);
	struct notifier n = {f, EPOLLIN};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, notify_later, &n), 0);
	struct epoll_event ev[2];
	cr_assert_eq(wait_n(ep, ev, 2, -1), 1);
	pthread_join(th, NULL);
	close(fd);
	close(ep);
}

Test(epoll, timeout_expires_with_nothing_ready)
{
	int ep = epoll_create1(0), fd;
	test_file(&fd);
	add(ep, fd, EPOLLIN);
	struct epoll_event ev[2];
	cr_assert_eq(wait_n(ep, ev, 2, 20), 0);
	cr_assert_eq(epoll_wait(ep, ev, 0, 0), -1);
	cr_assert_eq(errno, EINVAL);
	close(fd);
	close(ep);
}

Test(poll, mixes_ferry_and_kernel_fds)
{
	int fd, p[2];
	struct ffile *f = test_file(&fd);
	cr_assert_eq(pipe(p), 0);
	struct pollfd pfd[3] = {{.fd = fd, .events = POLLIN | POLLOUT},
				{.fd = p[0], .events = POLLIN},
				{.fd = -1, .events = POLLIN}};
	cr_assert_eq(poll(pfd, 3, 0), 0);
	ffile_notify(f, EPOLLOUT, EPOLLOUT);
	cr_assert_eq(poll(pfd, 3, 0), 1);
	cr_assert_eq(pfd[0].revents, POLLOUT);
	cr_assert_eq(write(p[1], "x", 1), 1);
	cr_assert_eq(poll(pfd, 3, 0), 2);
	cr_assert_eq(pfd[1].revents, POLLIN);
	cr_assert_eq(pfd[2].revents, 0);
	close(p[0]);
	close(p[1]);
	close(fd);
}

Test(poll, blocks_until_a_ferry_event)
{
	int fd;
	struct ffile *f = test_file(&fd);
	struct notifier n = {f, EPOLLIN};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, notify_later, &n), 0);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	cr_assert_eq(poll(&pfd, 1, -1), 1);
	cr_assert_eq(pfd.revents, POLLIN);
	pthread_join(th, NULL);
	close(fd);
}

Test(select, reports_ferry_readiness_in_the_sets)
{
	int fd, p[2];
	struct ffile *f = test_file(&fd);
	cr_assert_eq(pipe(p), 0);
	ffile_notify(f, EPOLLIN | EPOLLOUT, EPOLLIN);
	fd_set r, w;
	FD_ZERO(&r);
	FD_ZERO(&w);
	FD_SET(fd, &r);
	FD_SET(p[0], &r);
	FD_SET(fd, &w);
	int maxfd = (fd > p[0] ? fd : p[0]) + 1;
	struct timeval tv = {0, 0};
	cr_assert_eq(select(maxfd, &r, &w, NULL, &tv), 2);
	cr_assert(FD_ISSET(fd, &r));
	cr_assert(FD_ISSET(fd, &w));
	cr_assert_not(FD_ISSET(p[0], &r));
	close(p[0]);
	close(p[1]);
	close(fd);
}
