/*
 * Signals a socket sends (fasync.h): O_ASYNC with F_SETOWN brings SIGIO when
 * data arrives, not before, and F_SETSIG's real-time signal carries the
 * number O_ASYNC was set through and a band with POLLIN.
 *
 * Signals that interrupt a blocking call: one handled in the call's first
 * instants (ferry spins there, for a second in this scenario's client)
 * fails read, poll and epoll_wait with EINTR, and a read resumes under
 * SA_RESTART, as a handler run during the kernel's sleep does.
 */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static volatile sig_atomic_t io_signals, rt_signals;
static volatile int rt_fd = -1;
static volatile long rt_bands;

static void on_sigio(int sig)
{
	(void)sig;
	io_signals++;
}

static void on_rt(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	rt_signals++;
	rt_fd = si->si_fd;
	rt_bands |= si->si_band;
}

/* Waits (bounded) until *count is non-zero. */
static void wait_signal(volatile sig_atomic_t *count)
{
	for (int ms = 0; ms < WAIT_MS && !*count; ms += 10)
		sleep_ms(10);
}

static void async_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	signal(SIGIO, on_sigio);
	expect_rc(p, "setown", fcntl(fd, F_SETOWN, getpid()), 0, 0);
	expect_rc(p, "set_async", fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC | O_NONBLOCK), 0,
		  0);
	expect_true(p, "getown_is_self", fcntl(fd, F_GETOWN) == getpid());
	expect_true(p, "getfl_async", (fcntl(fd, F_GETFL) & O_ASYNC) != 0);
	sleep_ms(QUIET_MS);
	expect_int(p, "no_sigio_before_data", io_signals, 0);
	sync_send(p);
	wait_signal(&io_signals);
	expect_true(p, "sigio_on_data", io_signals > 0);
	char b;
	expect_rc(p, "read", read(fd, &b, 1), 1, 0);

	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_rt;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGRTMIN + 2, &sa, NULL);
	expect_rc(p, "setsig", fcntl(fd, F_SETSIG, SIGRTMIN + 2), 0, 0);
	expect_true(p, "getsig", fcntl(fd, F_GETSIG) == SIGRTMIN + 2);
	sync_send(p);
	wait_signal(&rt_signals);
	expect_true(p, "setsig_signal_on_data", rt_signals > 0);
	expect_true(p, "setsig_si_fd", rt_fd == fd);
	expect_true(p, "setsig_band_in", (rt_bands & POLLIN) != 0);
	expect_rc(p, "read_again", read(fd, &b, 1), 1, 0);
	close(fd);
}

static void async_client(struct peer *p)
{
	int fd = tcp_connect(p, p->port);
	sync_wait(p);
	expect_rc(p, "send", write(fd, "a", 1), 1, 0);
	sync_wait(p);
	expect_rc(p, "send_again", write(fd, "b", 1), 1, 0);
	char b;
	expect_rc(p, "eof", read(fd, &b, 1), 0, 0);
	close(fd);
}

/* The interrupted call waits this long for the byte that would end it. */
#define INTR_DATA_MS 600
/* The signal comes this soon after the call began. */
#define INTR_SIGNAL_MS 50

static volatile sig_atomic_t usr1_runs;

static void on_usr1(int sig)
{
	(void)sig;
	usr1_runs++;
}

static void *signal_soon(void *arg)
{
	sleep_ms(INTR_SIGNAL_MS);
	pthread_kill(*(pthread_t *)arg, SIGUSR1);
	return NULL;
}

static void usr1_handler(bool restart)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sa.sa_flags = restart ? SA_RESTART : 0;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
}

/* Each round: the client asks, then blocks; the byte comes well after the
 * signal, so a call the signal did not end returns it instead of EINTR. */
static void intr_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	for (const char *b = "abcd"; *b; b++) {
		sync_wait(p);
		sleep_ms(INTR_DATA_MS);
		expect_rc(p, "send", write(fd, b, 1), 1, 0);
	}
	char c;
	expect_rc(p, "eof", read(fd, &c, 1), 0, 0);
	close(fd);
}

/* Starts a round: the server's byte, and a signal to this thread, are on
 * their way. */
static pthread_t intr_round(struct peer *p, pthread_t *self)
{
	pthread_t th;
	*self = pthread_self();
	sync_send(p);
	if (pthread_create(&th, NULL, signal_soon, self) != 0)
		die(p, "pthread_create");
	return th;
}

static void intr_client(struct peer *p)
{
	/* Read by ferry at its start (the first TCP socket): a spin longer
	 * than the signal's delay. The kernel's run ignores it. */
	setenv("FERRY_SPIN_US", "1000000", 1);
	int fd = tcp_connect(p, p->port);
	char c = 0;
	pthread_t self, th;

	usr1_handler(false);
	/* What the application set is what it is told, whoever stands
	 * between. */
	struct sigaction q;
	expect_rc(p, "sigaction_query", sigaction(SIGUSR1, NULL, &q), 0, 0);
	expect_true(p, "sigaction_reports_the_handler", q.sa_handler == on_usr1);
	expect_int(p, "sigaction_reports_the_flags", q.sa_flags & (SA_SIGINFO | SA_RESTART), 0);
	expect_true(p, "signal_returns_the_default", signal(SIGUSR2, on_usr1) == SIG_DFL);
	expect_true(p, "signal_returns_the_handler", signal(SIGUSR2, SIG_DFL) == on_usr1);
	memset(&q, 0, sizeof(q));
	q.sa_sigaction = on_rt;
	q.sa_flags = SA_SIGINFO | SA_RESETHAND;
	sigemptyset(&q.sa_mask);
	sigaction(SIGUSR2, &q, NULL);
	raise(SIGUSR2);
	expect_rc(p, "resethand_query", sigaction(SIGUSR2, NULL, &q), 0, 0);
	expect_true(p, "resethand_left_the_default", q.sa_handler == SIG_DFL);
	expect_int(p, "resethand_ran_once", rt_signals, 1);
	/* SIG_IGN given with SA_SIGINFO is still no handler. */
	memset(&q, 0, sizeof(q));
	q.sa_handler = SIG_IGN;
	q.sa_flags = SA_SIGINFO;
	sigemptyset(&q.sa_mask);
	expect_rc(p, "ignore_with_siginfo", sigaction(SIGUSR2, &q, NULL), 0, 0);
	raise(SIGUSR2);
	expect_rc(p, "ignored_query", sigaction(SIGUSR2, NULL, &q), 0, 0);
	expect_true(p, "ignored_stays_ignored", q.sa_handler == SIG_IGN);
	th = intr_round(p, &self);
	expect_rc(p, "read_interrupted", read(fd, &c, 1), -1, EINTR);
	pthread_join(th, NULL);
	expect_rc(p, "read_after", read(fd, &c, 1), 1, 0);
	expect_int(p, "read_byte", c, 'a');

	usr1_handler(true);
	th = intr_round(p, &self);
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	expect_rc(p, "poll_interrupted_despite_restart", poll(&pf, 1, WAIT_MS), -1, EINTR);
	pthread_join(th, NULL);
	expect_rc(p, "poll_read_after", read(fd, &c, 1), 1, 0);

	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
	expect_rc(p, "epoll_ctl", epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0, 0);
	th = intr_round(p, &self);
	expect_rc(p, "epoll_wait_interrupted", epoll_wait(ep, &ev, 1, WAIT_MS), -1, EINTR);
	pthread_join(th, NULL);
	expect_rc(p, "epoll_read_after", read(fd, &c, 1), 1, 0);
	close(ep);

	th = intr_round(p, &self);
	expect_rc(p, "read_restarted", read(fd, &c, 1), 1, 0);
	pthread_join(th, NULL);
	expect_int(p, "restarted_byte", c, 'd');
	expect_int(p, "handler_runs", usr1_runs, 4);
	close(fd);
}

const struct scenario scen_signals[] = {
	{"o_async", async_server, async_client, false},
	{"signal_interrupts", intr_server, intr_client, false},
	{NULL, NULL, NULL, false},
};
