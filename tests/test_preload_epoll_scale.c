/*
 * The work of an epoll event or call does not grow with the instance's size:
 * with 10,000 idle files registered, a ctl, an event on one file and the wait
 * that reports it examine as few items as with ten (a server with thousands
 * of connections pays per connection that has something, not per one it
 * holds).
 */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include "preload/epoll.h"
#include "preload_test_util.h"

TestSuite(epoll_scale, .init = test_table_init, .timeout = 60);

#define IDLE_MANY 10000
#define IDLE_FEW 10

/* As many idle files as the descriptor limit lets this process hold, up to
 * want; returns how many. */
static int fd_room(int want)
{
	struct rlimit rl;
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rlim_t need = (rlim_t)want + 64;
	if (rl.rlim_cur < need) {
		rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
		cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "setrlimit: %s", strerror(errno));
	}
	return rl.rlim_cur < need ? (int)rl.rlim_cur - 64 : want;
}

struct cost {
	unsigned long ctl_add, ctl_mod, ctl_del, event, wait;
};

/* Registers idle files with ep, then measures the items examined by one
 * more file's add, its event, the wait reporting it, a mod and a delete. */
static struct cost measure(int idle)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	cr_assert_geq(ep, 0);
	int *fds = calloc((size_t)idle, sizeof(*fds));
	cr_assert_not_null(fds);
	for (int i = 0; i < idle; i++) {
		test_file(&fds[i]);
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
		cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev), 0, "add %d: %s", i,
			     strerror(errno));
	}
	int fd;
	struct ffile *f = test_file(&fd);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd}, out[4];
	struct cost c;
	unsigned long at = epoll_items_examined();
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
	c.ctl_add = epoll_items_examined() - at;
	at = epoll_items_examined();
	ffile_notify(f, EPOLLIN, EPOLLIN);
	c.event = epoll_items_examined() - at;
	at = epoll_items_examined();
	cr_assert_eq(epoll_wait(ep, out, 4, 0), 1);
	cr_assert_eq(out[0].data.fd, fd);
	c.wait = epoll_items_examined() - at;
	at = epoll_items_examined();
	ev.events = EPOLLIN | EPOLLET;
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev), 0);
	c.ctl_mod = epoll_items_examined() - at;
	at = epoll_items_examined();
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL), 0);
	c.ctl_del = epoll_items_examined() - at;
	close(fd);
	for (int i = 0; i < idle; i++)
		close(fds[i]);
	free(fds);
	close(ep);
	return c;
}

Test(epoll_scale, work_per_event_does_not_grow_with_idle_files)
{
	int many = fd_room(IDLE_MANY);
	cr_assert_geq(many, 10 * IDLE_FEW, "the descriptor limit leaves room for only %d files",
		      many);
	struct cost few = measure(IDLE_FEW), lots = measure(many);
	cr_expect_eq(lots.ctl_add, few.ctl_add, "add: %lu items with %d idle, %lu with %d",
		     lots.ctl_add, many, few.ctl_add, IDLE_FEW);
	cr_expect_eq(lots.event, few.event, "event: %lu items with %d idle, %lu with %d",
		     lots.event, many, few.event, IDLE_FEW);
	cr_expect_eq(lots.wait, few.wait, "wait: %lu items with %d idle, %lu with %d", lots.wait,
		     many, few.wait, IDLE_FEW);
	cr_expect_eq(lots.ctl_mod, few.ctl_mod, "mod: %lu items with %d idle, %lu with %d",
		     lots.ctl_mod, many, few.ctl_mod, IDLE_FEW);
	cr_expect_eq(lots.ctl_del, few.ctl_del, "del: %lu items with %d idle, %lu with %d",
		     lots.ctl_del, many, few.ctl_del, IDLE_FEW);
	cr_expect_leq(lots.ctl_mod + lots.event + lots.wait, 8,
		      "one file's mod, event and wait examined %lu items",
		      lots.ctl_mod + lots.event + lots.wait);
}
