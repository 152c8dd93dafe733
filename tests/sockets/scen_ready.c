/* Scenarios: readiness (epoll, poll, select) and signals interrupting blocked calls. */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

static int ep_add(int ep, int fd, uint32_t events, uint32_t tag)
{
	struct epoll_event ev = {.events = events, .data.u32 = tag};
	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

/* A generic server: sends "data1" when told, waits, "data2", then closes when told. */
static void feeder_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	for (int i = 0; i < 3; i++) {
		sync_wait(p);
		send(fd, "0123456789", 10, 0);
	}
	sync_wait(p);
	shutdown(fd, SHUT_WR);
	sync_wait(p);
	close(fd);
}

/* ---- epoll_level ------------------------------------------------------------ */

static void level_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	expect_rc(p, "add", ep_add(ep, fd, EPOLLIN, 7), 0, 0);
	struct epoll_event ev[4];
	expect_rc(p, "idle", ep_wait(ep, ev, 4, QUIET_MS), 0, 0);
	sync_send(p);
	expect_rc(p, "ready", ep_wait(ep, ev, 4, WAIT_MS), 1, 0);
	expect_true(p, "event", ev[0].events == EPOLLIN && ev[0].data.u32 == 7);
	expect_rc(p, "still_ready", ep_wait(ep, ev, 4, 0), 1, 0);
	char buf[16];
	expect_rc(p, "read5", read(fd, buf, 5), 5, 0);
	expect_rc(p, "ready_with_rest", ep_wait(ep, ev, 4, 0), 1, 0);
	expect_rc(p, "read_rest", read(fd, buf, 16), 5, 0);
	expect_rc(p, "drained", ep_wait(ep, ev, 4, QUIET_MS), 0, 0);
	struct epoll_event out = {.events = EPOLLIN | EPOLLOUT, .data.u32 = 8};
	expect_rc(p, "mod_out", epoll_ctl(ep, EPOLL_CTL_MOD, fd, &out), 0, 0);
	expect_rc(p, "writable", ep_wait(ep, ev, 4, WAIT_MS), 1, 0);
	expect_true(p, "pollout_event", ev[0].events == EPOLLOUT && ev[0].data.u32 == 8);
	expect_rc(p, "add_twice", ep_add(ep, fd, EPOLLIN, 9), -1, EEXIST);
	expect_rc(p, "del", epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL), 0, 0);
	expect_rc(p, "del_again", epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL), -1, ENOENT);
	expect_rc(p, "mod_missing", epoll_ctl(ep, EPOLL_CTL_MOD, fd, &out), -1, ENOENT);
	expect_rc(p, "add_self", ep_add(ep, ep, EPOLLIN, 0), -1, EINVAL);
	for (int i = 0; i < 4; i++)
		sync_send(p);
	close(ep);
	close(fd);
}

/* ---- epoll_edge -------------------------------------------------------------- */

static void edge_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int ep = epoll_create1(0);
	ep_add(ep, fd, EPOLLIN | EPOLLET, 1);
	struct epoll_event ev[4];
	sync_send(p);
	expect_rc(p, "first", ep_wait(ep, ev, 4, WAIT_MS), 1, 0);
	expect_int(p, "first_events", ev[0].events, EPOLLIN);
	expect_rc(p, "not_again_unread", ep_wait(ep, ev, 4, QUIET_MS), 0, 0);
	sync_send(p);
	expect_rc(p, "new_data", ep_wait(ep, ev, 4, WAIT_MS), 1, 0);
	char buf[32];
	expect_rc(p, "read_all", read_full(fd, buf, 20), 20, 0);
	expect_rc(p, "quiet", ep_wait(ep, ev, 4, QUIET_MS), 0, 0);
	sync_send(p);
	expect_rc(p, "third", ep_wait(ep, ev, 4, WAIT_MS), 1, 0);
	read_full(fd, buf, 10);
	sync_send(p);
	expect_rc(p, "hangup", ep_wait(ep, ev, 4, WAIT_MS), 1, 0);
	expect_int(p, "hangup_events", ev[0].events, EPOLLIN);
	expect_rc(p, "eof", read(fd, buf, 1), 0, 0);
	sync_send(p);
	close(ep);
	close(fd);
}

/* ---- epoll_oneshot ----------------------------------------------------------- */

static void oneshot_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int ep = epoll_create(4);
	ep_add(ep, fd, EPOLLIN | EPOLLONESHOT, 3);
	struct epoll_event ev[2];
	char buf[32];
	sync_send(p);
	expect_rc(p, "first", ep_wait(ep, ev, 2, WAIT_MS), 1, 0);
	read_full(fd, buf, 10);
	sync_send(p);
	sleep_ms(QUIET_MS);
	expect_rc(p, "disarmed", ep_wait(ep, ev, 2, QUIET_MS), 0, 0);
	struct epoll_event re = {.events = EPOLLIN | EPOLLONESHOT, .data.u32 = 4};
	expect_rc(p, "rearm", epoll_ctl(ep, EPOLL_CTL_MOD, fd, &re), 0, 0);
	expect_rc(p, "after_rearm", ep_wait(ep, ev, 2, WAIT_MS), 1, 0);
	expect_int(p, "rearm_tag", ev[0].data.u32, 4);
	expect_rc(p, "disarmed_again", ep_wait(ep, ev, 2, QUIET_MS), 0, 0);
	for (int i = 0; i < 3; i++)
		sync_send(p);
	close(ep);
	close(fd);
}

/* ---- epoll_rdhup: peer's shutdown(SHUT_WR), then ours: EPOLLHUP ------------------ */

static void rdhup_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int ep = epoll_create1(0);
	ep_add(ep, fd, EPOLLIN | EPOLLRDHUP, 0);
	struct epoll_event ev[2];
	for (int i = 0; i < 3; i++)
		sync_send(p);
	char buf[32];
	expect_rc(p, "read_all", read_full(fd, buf, 30), 30, 0);
	sync_send(p); /* peer: shutdown(SHUT_WR) */
	expect_rc(p, "rdhup", ep_wait(ep, ev, 2, WAIT_MS), 1, 0);
	expect_int(p, "rdhup_events", ev[0].events, EPOLLIN | EPOLLRDHUP);
	expect_rc(p, "still_writable", send(fd, "w", 1, 0), 1, 0);
	shutdown(fd, SHUT_WR);
	expect_rc(p, "hup", ep_wait(ep, ev, 2, WAIT_MS), 1, 0);
	expect_int(p, "hup_events", ev[0].events, EPOLLIN | EPOLLRDHUP | EPOLLHUP);
	sync_send(p);
	close(ep);
	close(fd);
}

/* ---- epoll_exclusive --------------------------------------------------------- */

static void exclusive_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int ep1 = epoll_create1(0), ep2 = epoll_create1(0);
	expect_rc(p, "add_exclusive_1", ep_add(ep1, fd, EPOLLIN | EPOLLEXCLUSIVE, 1), 0, 0);
	expect_rc(p, "add_exclusive_2", ep_add(ep2, fd, EPOLLIN | EPOLLEXCLUSIVE, 2), 0, 0);
	struct epoll_event bad = {.events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT};
	int other = socket(AF_INET, SOCK_STREAM, 0);
	expect_rc(p, "exclusive_oneshot", epoll_ctl(ep1, EPOLL_CTL_ADD, other, &bad), -1, EINVAL);
	close(other);
	struct epoll_event mod = {.events = EPOLLIN};
	expect_rc(p, "mod_exclusive", epoll_ctl(ep1, EPOLL_CTL_MOD, fd, &mod), -1, EINVAL);
	sync_send(p);
	/*
	 * EPOLLEXCLUSIVE only promises that some exclusive set is woken: the
	 * kernel stops at the first one, so the other may never see this event.
	 */
	struct pollfd both[2] = {{.fd = ep1, .events = POLLIN}, {.fd = ep2, .events = POLLIN}};
	expect_true(p, "some_set_ready", poll(both, 2, WAIT_MS) >= 1);
	struct epoll_event ev[2];
	int reported = 0;
	uint32_t tags = 0;
	if (ep_wait(ep1, ev, 2, 0) == 1) {
		reported++;
		tags |= ev[0].data.u32;
	}
	if (ep_wait(ep2, ev, 2, 0) == 1) {
		reported++;
		tags |= ev[0].data.u32;
	}
	expect_true(p, "reported_by_one_or_both", reported >= 1 && (tags & ~3u) == 0);
	for (int i = 0; i < 4; i++)
		sync_send(p);
	close(ep1);
	close(ep2);
	close(fd);
}

/* ---- epoll_two_sets: one fd in two sets; close removes it from both ------------- */

static void twosets_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int ep1 = epoll_create1(0), ep2 = epoll_create1(0);
	ep_add(ep1, fd, EPOLLIN, 1);
	ep_add(ep2, fd, EPOLLIN | EPOLLET, 2);
	sync_send(p);
	struct epoll_event ev[2];
	expect_rc(p, "set1", ep_wait(ep1, ev, 2, WAIT_MS), 1, 0);
	expect_rc(p, "set2", ep_wait(ep2, ev, 2, WAIT_MS), 1, 0);
	expect_rc(p, "set1_level_again", ep_wait(ep1, ev, 2, 0), 1, 0);
	expect_rc(p, "set2_edge_quiet", ep_wait(ep2, ev, 2, QUIET_MS), 0, 0);
	expect_rc(p, "del_from_1", epoll_ctl(ep1, EPOLL_CTL_DEL, fd, NULL), 0, 0);
	expect_rc(p, "set1_empty", ep_wait(ep1, ev, 2, QUIET_MS), 0, 0);
	sync_send(p);
	expect_rc(p, "set2_still_works", ep_wait(ep2, ev, 2, WAIT_MS), 1, 0);
	ep_add(ep1, fd, EPOLLIN, 1);
	/* The last close of a file removes it from every epoll set. */
	close(fd);
	expect_rc(p, "set1_after_close", ep_wait(ep1, ev, 2, QUIET_MS), 0, 0);
	expect_rc(p, "set2_after_close", ep_wait(ep2, ev, 2, QUIET_MS), 0, 0);
	for (int i = 0; i < 3; i++)
		sync_send(p);
	close(ep1);
	close(ep2);
}

/* ---- epoll_nested: an epoll fd inside another, and inside poll ------------------- */

static void nested_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int inner = epoll_create1(0), outer = epoll_create1(0);
	ep_add(inner, fd, EPOLLIN, 11);
	expect_rc(p, "add_inner", ep_add(outer, inner, EPOLLIN, 22), 0, 0);
	struct epoll_event ev[2];
	expect_rc(p, "outer_idle", ep_wait(outer, ev, 2, QUIET_MS), 0, 0);
	struct pollfd pfd = {.fd = inner, .events = POLLIN};
	expect_rc(p, "poll_inner_idle", poll(&pfd, 1, 0), 0, 0);
	sync_send(p);
	expect_rc(p, "outer_ready", ep_wait(outer, ev, 2, WAIT_MS), 1, 0);
	expect_true(p, "outer_event", ev[0].events == EPOLLIN && ev[0].data.u32 == 22);
	expect_rc(p, "poll_inner_ready", poll(&pfd, 1, 0), 1, 0);
	expect_int(p, "poll_inner_revents", pfd.revents, POLLIN);
	expect_rc(p, "inner_ready", ep_wait(inner, ev, 2, 0), 1, 0);
	expect_int(p, "inner_tag", ev[0].data.u32, 11);
	char buf[16];
	read_full(fd, buf, 10);
	expect_rc(p, "outer_quiet", ep_wait(outer, ev, 2, QUIET_MS), 0, 0);
	for (int i = 0; i < 4; i++)
		sync_send(p);
	close(outer);
	close(inner);
	close(fd);
}

/* ---- epoll_listener: a pending connection makes the listener readable ---------- */

static void eplisten_server(struct peer *p)
{
	int ep = epoll_create1(0);
	ep_add(ep, p->lfd, EPOLLIN, 5);
	struct epoll_event ev[2];
	expect_rc(p, "no_pending", ep_wait(ep, ev, 2, QUIET_MS), 0, 0);
	sync_send(p);
	expect_rc(p, "pending", ep_wait(ep, ev, 2, WAIT_MS), 1, 0);
	expect_int(p, "pending_events", ev[0].events, EPOLLIN);
	int fd = tcp_accept(p, p->lfd);
	expect_rc(p, "none_left", ep_wait(ep, ev, 2, QUIET_MS), 0, 0);
	ep_add(ep, fd, EPOLLOUT, 6);
	expect_rc(p, "accepted_writable", ep_wait(ep, ev, 2, WAIT_MS), 1, 0);
	expect_int(p, "writable_tag", ev[0].data.u32, 6);
	sync_wait(p);
	close(fd);
	close(ep);
}

static void eplisten_client(struct peer *p)
{
	sync_wait(p);
	int fd = tcp_connect(p, p->port);
	sync_send(p);
	close(fd);
}

/* ---- poll_select_mixed: ferry and kernel fds in one poll/select ----------------- */

static void mixed_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	int pipefd[2];
	if (pipe(pipefd))
		die(p, "pipe");
	int udp = socket(AF_INET, SOCK_DGRAM, 0);
	int efd = eventfd(0, 0);
	struct pollfd pfd[5] = {
		{.fd = fd, .events = POLLIN}, {.fd = pipefd[0], .events = POLLIN},
		{.fd = udp, .events = POLLIN}, {.fd = efd, .events = POLLIN},
		{.fd = -1, .events = POLLIN},
	};
	expect_rc(p, "poll_idle", poll(pfd, 5, QUIET_MS), 0, 0);
	write(pipefd[1], "p", 1);
	expect_rc(p, "poll_pipe_only", poll(pfd, 5, WAIT_MS), 1, 0);
	expect_int(p, "pipe_revents", pfd[1].revents, POLLIN);
	expect_int(p, "sock_revents_idle", pfd[0].revents, 0);
	sync_send(p);
	wait_for(fd, POLLIN);
	expect_rc(p, "poll_both", poll(pfd, 5, WAIT_MS), 2, 0);
	expect_true(p, "revents", pfd[0].revents == POLLIN && pfd[1].revents == POLLIN &&
					 pfd[2].revents == 0 && pfd[3].revents == 0 &&
					 pfd[4].revents == 0);
	struct timespec ts = {.tv_sec = 5};
	sigset_t mask;
	sigemptyset(&mask);
	expect_rc(p, "ppoll_both", ppoll(pfd, 5, &ts, &mask), 2, 0);

	fd_set rd, wr;
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_SET(fd, &rd);
	FD_SET(pipefd[0], &rd);
	FD_SET(udp, &rd);
	FD_SET(fd, &wr);
	int maxfd = fd > pipefd[0] ? fd : pipefd[0];
	maxfd = udp > maxfd ? udp : maxfd;
	struct timeval tv = {.tv_sec = 5};
	expect_rc(p, "select", select(maxfd + 1, &rd, &wr, NULL, &tv), 3, 0);
	expect_true(p, "select_sets", FD_ISSET(fd, &rd) && FD_ISSET(pipefd[0], &rd) &&
					  !FD_ISSET(udp, &rd) && FD_ISSET(fd, &wr));
	FD_ZERO(&rd);
	FD_SET(fd, &rd);
	ts = (struct timespec){.tv_sec = 5};
	expect_rc(p, "pselect", pselect(fd + 1, &rd, NULL, NULL, &ts, &mask), 1, 0);

	char buf[16];
	read_full(fd, buf, 10);
	read(pipefd[0], buf, 1);
	FD_ZERO(&rd);
	FD_SET(fd, &rd);
	FD_SET(pipefd[0], &rd);
	tv = (struct timeval){.tv_usec = QUIET_MS * 1000};
	expect_rc(p, "select_quiet", select(maxfd + 1, &rd, NULL, NULL, &tv), 0, 0);
	eventfd_write(efd, 1);
	expect_rc(p, "poll_eventfd", poll(pfd, 5, WAIT_MS), 1, 0);
	expect_int(p, "eventfd_revents", pfd[3].revents, POLLIN);
	int closed = dup(udp);
	close(closed);
	struct pollfd nv = {.fd = closed, .events = POLLIN};
	expect_rc(p, "poll_closed_fd", poll(&nv, 1, 0), 1, 0);
	expect_int(p, "pollnval", nv.revents, POLLNVAL);
	FD_ZERO(&rd);
	FD_SET(closed, &rd);
	tv = (struct timeval){0};
	expect_rc(p, "select_closed_fd", select(closed + 1, &rd, NULL, NULL, &tv), -1, EBADF);
	for (int i = 0; i < 4; i++)
		sync_send(p);
	close(efd);
	close(udp);
	close(pipefd[0]);
	close(pipefd[1]);
	close(fd);
}

/* ---- signals: EINTR, or restart under SA_RESTART, as the kernel does ---------- */

static atomic_int signals_seen;
static void on_usr1(int sig)
{
	(void)sig;
	atomic_fetch_add(&signals_seen, 1);
}

struct kicker {
	pthread_t target;
	atomic_int stop;
	struct peer *p;
	int notify_after; /* tell the server to send once this many signals went out */
};

/* Signals the target until told to stop: some signal lands while it blocks. */
static void *kicker_run(void *v)
{
	struct kicker *k = v;
	for (int n = 1; !atomic_load(&k->stop); n++) {
		pthread_kill(k->target, SIGUSR1);
		if (n == k->notify_after)
			sync_send(k->p);
		sleep_ms(20);
	}
	return NULL;
}

static void kicker_start(struct kicker *k, pthread_t *th, struct peer *p, int notify_after)
{
	k->target = pthread_self();
	atomic_store(&k->stop, 0);
	k->p = p;
	k->notify_after = notify_after;
	pthread_create(th, NULL, kicker_run, k);
}

static void kicker_stop(struct kicker *k, pthread_t th)
{
	atomic_store(&k->stop, 1);
	pthread_join(th, NULL);
}

static void handler_set(bool restart)
{
	struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = restart ? SA_RESTART : 0};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
}

static void signals_server(struct peer *p)
{
	struct kicker k;
	pthread_t th;
	handler_set(false);
	kicker_start(&k, &th, p, 0);
	expect_rc(p, "accept_eintr", accept(p->lfd, NULL, NULL), -1, EINTR);
	kicker_stop(&k, th);
	sync_send(p);
	int fd = tcp_accept(p, p->lfd);
	sync_wait(p); /* the client's restarted recv has seen enough signals */
	expect_rc(p, "send", send(fd, "late", 4, 0), 4, 0);
	sync_wait(p);
	close(fd);
}

static void signals_client(struct peer *p)
{
	struct kicker k;
	pthread_t th;
	char buf[8];
	sync_wait(p);
	int fd = tcp_connect(p, p->port);

	handler_set(false);
	kicker_start(&k, &th, p, 0);
	expect_rc(p, "recv_eintr", recv(fd, buf, sizeof(buf), 0), -1, EINTR);
	kicker_stop(&k, th);

	int ep = epoll_create1(0);
	ep_add(ep, fd, EPOLLIN, 0);
	struct epoll_event ev;
	handler_set(true);
	kicker_start(&k, &th, p, 0);
	expect_rc(p, "epoll_wait_eintr_despite_restart", epoll_wait(ep, &ev, 1, 20000), -1, EINTR);
	kicker_stop(&k, th);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	kicker_start(&k, &th, p, 0);
	expect_rc(p, "poll_eintr_despite_restart", poll(&pfd, 1, 20000), -1, EINTR);
	kicker_stop(&k, th);

	/* With SA_RESTART a blocked recv resumes and returns the late data. */
	int before = atomic_load(&signals_seen);
	kicker_start(&k, &th, p, 5);
	expect_rc(p, "recv_restarted", recv(fd, buf, sizeof(buf), 0), 4, 0);
	kicker_stop(&k, th);
	expect_true(p, "signals_during_recv", atomic_load(&signals_seen) - before >= 5);
	sync_send(p);
	close(ep);
	close(fd);
}

/* ---- kernel_fd_wakes: a pipe turning readable wakes poll/select/epoll_wait ------ */

/* The peer side: lets each wait begin, then wakes it through the pipe. */
static void kwake_kick(struct peer *p, int rounds)
{
	for (int i = 0; i < rounds; i++) {
		sync_wait(p);
		sleep_ms(200); /* the waiter is blocked by now (very likely) */
		sync_send(p);
	}
	sync_wait(p);
}

/* Waits on the sync pipe only (the stream makes this a ferry process):
 * poll, select when asked, then epoll, each woken by kwake_kick. */
static void kwake_wait(struct peer *p, bool with_select)
{
	char c;
	struct pollfd pfd = {.fd = p->sync_in, .events = POLLIN};
	sync_send(p);
	expect_rc(p, "poll_pipe", poll(&pfd, 1, 10000), 1, 0);
	expect_rc(p, "poll_pipe_read", read(p->sync_in, &c, 1), 1, 0);
	sync_send(p);
	if (with_select) {
		fd_set rd;
		FD_ZERO(&rd);
		FD_SET(p->sync_in, &rd);
		struct timeval tv = {.tv_sec = 10};
		expect_rc(p, "select_pipe", select(p->sync_in + 1, &rd, NULL, NULL, &tv), 1, 0);
		expect_rc(p, "select_pipe_read", read(p->sync_in, &c, 1), 1, 0);
		sync_send(p);
	}
	int ep = epoll_create1(0);
	ep_add(ep, p->sync_in, EPOLLIN, 1);
	struct epoll_event ev;
	expect_rc(p, "epoll_pipe", ep_wait(ep, &ev, 1, 10000), 1, 0);
	expect_rc(p, "epoll_pipe_read", read(p->sync_in, &c, 1), 1, 0);
	sync_send(p);
	close(ep);
}

static void kwake_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	kwake_kick(p, 3);
	close(fd);
}

static void kwake_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	kwake_wait(p, true);
	close(fd);
}

/* The same on the accepting side, which also holds a listener. */
static void kwake_server_waits(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	kwake_wait(p, false);
	close(fd);
}

static void kwake_client_kicks(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	kwake_kick(p, 2);
	close(fd);
}

const struct scenario scen_ready[] = {
	{"kernel_fd_wakes_acceptor", kwake_server_waits, kwake_client_kicks, false},
	{"kernel_fd_wakes", kwake_server, kwake_client, false},
	{"epoll_level", feeder_server, level_client, false},
	{"epoll_edge", feeder_server, edge_client, false},
	{"epoll_oneshot", feeder_server, oneshot_client, false},
	{"epoll_rdhup", feeder_server, rdhup_client, false},
	{"epoll_exclusive", feeder_server, exclusive_client, false},
	{"epoll_two_sets", feeder_server, twosets_client, false},
	{"epoll_nested", feeder_server, nested_client, false},
	{"epoll_listener", eplisten_server, eplisten_client, false},
	{"poll_select_mixed", feeder_server, mixed_client, false},
	{"signals", signals_server, signals_client, false},
	{NULL, NULL, NULL, false},
};
