/* epoll registrations of a ferry file that starts to be watched in the
 * kernel too (a listener: hybrid) or is handed to the kernel for good: a
 * one-shot item that already fired stays disarmed there until
 * EPOLL_CTL_MOD, as in the kernel. The file's kernel fd is an eventfd, so
 * the test makes the kernel side ready by writing to it. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "preload/epoll.h"
#include "preload_test_util.h"

TestSuite(epoll_handover, .init = test_table_init, .timeout = 20);

static int wait_n(int ep, struct epoll_event *ev, int max)
{
	int n = epoll_wait(ep, ev, max, 0);
	cr_assert_geq(n, 0, "epoll_wait: %s", strerror(errno));
	return n;
}

static void kernel_ready(int fd)
{
	uint64_t one = 1;
	cr_assert_eq(write(fd, &one, sizeof(one)), (ssize_t)sizeof(one));
}

/* A one-shot item on a fresh test file, fired once through ferry. */
static struct ffile *fired_oneshot(int ep, int *fd)
{
	struct ffile *f = test_file(fd);
	struct epoll_event add = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 1};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, *fd, &add), 0);
	ffile_notify(f, EPOLLIN, EPOLLIN);
	struct epoll_event ev[4];
	cr_assert_eq(wait_n(ep, ev, 4), 1);
	cr_assert_eq(ffile_mask(f), EPOLLIN);
	ffile_notify(f, 0, 0);
	return f;
}

Test(epoll_handover, fired_oneshot_stays_disarmed_when_the_file_becomes_hybrid)
{
	int ep = epoll_create1(0), fd;
	struct ffile *f = fired_oneshot(ep, &fd);
	f->hybrid = true; /* as listen() does */
	epoll_file_hybrid(f);
	kernel_ready(fd);
	struct epoll_event ev[4];
	cr_assert_eq(wait_n(ep, ev, 4), 0, "fired before: disarmed in the kernel as well");
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4), 0, "and in ferry");
	ffile_notify(f, 0, 0);
	struct epoll_event mod = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 2};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &mod), 0);
	cr_assert_eq(wait_n(ep, ev, 4), 1, "re-armed: the kernel side is ready");
	cr_assert_eq(ev[0].events, EPOLLIN);
	cr_assert_eq(ev[0].data.u64, 2);
	close(fd);
	close(ep);
}

Test(epoll_handover, armed_oneshot_fires_once_after_the_file_becomes_hybrid)
{
	int ep = epoll_create1(0), fd;
	struct ffile *f = test_file(&fd);
	struct epoll_event add = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 3};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &add), 0);
	f->hybrid = true;
	epoll_file_hybrid(f);
	kernel_ready(fd);
	struct epoll_event ev[4];
	cr_assert_eq(wait_n(ep, ev, 4), 1, "not fired before: armed in the kernel");
	cr_assert_eq(ev[0].data.u64, 3);
	close(fd);
	close(ep);
}

Test(epoll_handover, fired_oneshot_stays_disarmed_when_the_kernel_takes_the_file)
{
	int ep = epoll_create1(0), fd;
	struct ffile *f = fired_oneshot(ep, &fd);
	/* As sock_handoff does: the registrations move, the number leaves. */
	ffile_get(f);
	epoll_file_kernelize(f);
	fdtable_forget_file(&fdtab, f);
	ffile_put(&fdtab, f);
	kernel_ready(fd);
	struct epoll_event ev[4];
	cr_assert_eq(wait_n(ep, ev, 4), 0, "fired before: disarmed in the kernel");
	struct epoll_event mod = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 4};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &mod), 0);
	cr_assert_eq(wait_n(ep, ev, 4), 1);
	cr_assert_eq(ev[0].data.u64, 4);
	close(fd);
	close(ep);
}

/* A hybrid file is ready through ferry or through its kernel fd: whichever
 * reports a one-shot item first disarms it for both. */
Test(epoll_handover, a_hybrid_oneshot_fires_once_from_either_side)
{
	int ep = epoll_create1(0), fd;
	struct ffile *f = test_file(&fd);
	f->hybrid = true;
	struct epoll_event add = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 7};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &add), 0);
	struct epoll_event ev[4];
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4), 1, "ferry's side");
	ffile_notify(f, 0, 0);
	kernel_ready(fd);
	cr_assert_eq(wait_n(ep, ev, 4), 0, "fired through ferry: the kernel side is disarmed");
	struct epoll_event mod = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 8};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &mod), 0);
	cr_assert_eq(wait_n(ep, ev, 4), 1, "the kernel's side");
	cr_assert_eq(ev[0].data.u64, 8);
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4), 0, "fired through the kernel: ferry's side is disarmed");
	close(fd);
	close(ep);
}

/* The tests above poll with a zero timeout, which must look at the kernel
 * side too (a set with ferry files in it is ferry's to wait on). */
Test(epoll_handover, a_zero_timeout_sees_kernel_fds)
{
	int ep = epoll_create1(0), fd, p[2];
	test_file(&fd);
	cr_assert_eq(pipe(p), 0);
	struct epoll_event add = {.events = EPOLLIN, .data.u64 = 5};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &add), 0);
	add.data.u64 = 6;
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &add), 0);
	struct epoll_event ev[4];
	cr_assert_eq(wait_n(ep, ev, 4), 0);
	cr_assert_eq(write(p[1], "x", 1), 1);
	cr_assert_eq(wait_n(ep, ev, 4), 1);
	cr_assert_eq(ev[0].data.u64, 6);
	close(p[0]);
	close(p[1]);
	close(fd);
	close(ep);
}

/* Applications often leave data 0 or give two fds the same pointer: the
 * kernel's report for another fd must not disarm a hybrid one-shot item
 * that happens to carry the same data. */
Test(epoll_handover, another_fd_with_the_same_data_leaves_a_hybrid_oneshot_armed)
{
	int ep = epoll_create1(0), fd, p[2];
	struct ffile *f = test_file(&fd);
	f->hybrid = true;
	cr_assert_eq(pipe(p), 0);
	struct epoll_event add = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 9};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &add), 0);
	add.events = EPOLLIN;
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &add), 0);
	cr_assert_eq(write(p[1], "x", 1), 1);
	struct epoll_event ev[4];
	cr_assert_eq(wait_n(ep, ev, 4), 1, "the pipe");
	cr_assert_eq(ev[0].data.u64, 9);
	char c;
	cr_assert_eq(read(p[0], &c, 1), 1);
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4), 1, "the one-shot is still armed");
	cr_assert_eq(ev[0].events, EPOLLIN);
	cr_assert_eq(ev[0].data.u64, 9);
	ffile_notify(f, 0, 0);
	kernel_ready(fd);
	cr_assert_eq(wait_n(ep, ev, 4), 0, "fired through ferry: the kernel side is disarmed");
	struct epoll_event mod = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 9};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &mod), 0);
	cr_assert_eq(wait_n(ep, ev, 4), 1, "re-armed: the kernel side is ready");
	cr_assert_eq(ev[0].events, EPOLLIN);
	cr_assert_eq(ev[0].data.u64, 9, "the application's data, not ferry's");
	ffile_notify(f, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4), 0, "fired through the kernel: ferry's side is disarmed");
	cr_assert_eq(write(p[1], "x", 1), 1);
	cr_assert_eq(wait_n(ep, ev, 4), 1, "the pipe still reports");
	cr_assert_eq(ev[0].data.u64, 9);
	close(p[0]);
	close(p[1]);
	close(fd);
	close(ep);
}

/* Two hybrid one-shot items with equal data: the kernel's report for one
 * disarms that one, and the other still fires once. */
Test(epoll_handover, a_kernel_report_disarms_exactly_its_own_hybrid_oneshot)
{
	int ep = epoll_create1(0), fd1, fd2;
	struct ffile *f1 = test_file(&fd1), *f2 = test_file(&fd2);
	f1->hybrid = f2->hybrid = true;
	struct epoll_event add = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 0};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd1, &add), 0);
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd2, &add), 0);
	kernel_ready(fd1);
	struct epoll_event ev[4];
	cr_assert_eq(wait_n(ep, ev, 4), 1, "fd1's kernel side");
	cr_assert_eq(ev[0].events, EPOLLIN);
	cr_assert_eq(ev[0].data.u64, 0);
	ffile_notify(f1, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4), 0, "fd1 fired: its ferry side is disarmed");
	ffile_notify(f2, EPOLLIN, EPOLLIN);
	cr_assert_eq(wait_n(ep, ev, 4), 1, "fd2 is still armed");
	cr_assert_eq(ev[0].data.u64, 0);
	cr_assert_eq(wait_n(ep, ev, 4), 0, "and fires once");
	kernel_ready(fd2);
	cr_assert_eq(wait_n(ep, ev, 4), 0, "on either side");
	/* Re-armed, both kernel sides are ready at once (fd1's disarmed by
	 * the kernel, fd2's taken out by ferry); a short buffer leaves the
	 * second for the next wait. */
	struct epoll_event mod = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 1};
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd1, &mod), 0);
	mod.data.u64 = 2;
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd2, &mod), 0);
	ffile_notify(f1, 0, 0);
	ffile_notify(f2, 0, 0);
	cr_assert_eq(wait_n(ep, ev, 1), 1);
	uint64_t first = ev[0].data.u64;
	cr_assert_eq(wait_n(ep, ev, 1), 1);
	cr_assert_eq(first + ev[0].data.u64, 3, "each once: %lu then %lu", (unsigned long)first,
		     (unsigned long)ev[0].data.u64);
	cr_assert_eq(wait_n(ep, ev, 4), 0);
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd1, &mod), 0);
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd2, &mod), 0);
	cr_assert_eq(wait_n(ep, ev, 4), 2, "both in one wait");
	cr_assert_eq(ev[0].data.u64 + ev[1].data.u64, 4);
	close(fd1);
	close(fd2);
	close(ep);
}
