/*
 * Signals a socket sends (fasync.h): O_ASYNC with F_SETOWN brings SIGIO when
 * data arrives, not before, and F_SETSIG's real-time signal carries the
 * number O_ASYNC was set through and a band with POLLIN.
 */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
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

const struct scenario scen_signals[] = {
	{"o_async", async_server, async_client, false},
	{NULL, NULL, NULL, false},
};
