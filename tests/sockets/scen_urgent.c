/*
 * Urgent data (send with MSG_OOB), as Linux TCP has it: the last byte of
 * such a send is urgent; the receiver sees POLLPRI (select: exceptfds) and
 * SIGURG if it owns the socket, takes the byte with recv(MSG_OOB) once,
 * and ordinary reads stop short of the mark (SIOCATMARK) and skip the byte
 * -- unless SO_OOBINLINE keeps it in line. A newer mark replaces an unread
 * one, whose byte then stays in line.
 */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

/* The ioctl itself; sockatmark(3) is checked once too (glibc's reaches the
 * kernel by an internal call, so an interposer must answer it as well). */
static int atmark(int fd)
{
	int v = -1;
	return ioctl(fd, SIOCATMARK, &v) ? -1 : v;
}

static int inq(int fd)
{
	int v = -1;
	return ioctl(fd, FIONREAD, &v) ? -1 : v;
}

/* poll once for ms (0: just look); the revents, 0 when nothing is ready. */
static short poll_ms(int fd, short events, int ms)
{
	struct pollfd pfd = {.fd = fd, .events = events};
	for (;;) {
		int n = poll(&pfd, 1, ms);
		if (n < 0 && errno == EINTR)
			continue;
		return n > 0 ? pfd.revents : 0;
	}
}

/* select with fd in exceptfds only: 1 when it is reported there. */
static int select_except(int fd, int ms)
{
	fd_set ex;
	FD_ZERO(&ex);
	FD_SET(fd, &ex);
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	int n = select(fd + 1, NULL, NULL, &ex, &tv);
	return n < 0 ? -1 : n > 0 && FD_ISSET(fd, &ex);
}

/* A read into a buffer larger than anything sent: where it stops is the check. */
static void expect_read(struct peer *p, const char *key, int fd, const char *want)
{
	char buf[64] = {0};
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	char rc_key[64];
	snprintf(rc_key, sizeof(rc_key), "%s_rc", key);
	expect_rc(p, rc_key, n, (long)strlen(want), 0);
	expect_str(p, key, n > 0 ? buf : "", want);
}

/* recv(MSG_OOB) of one byte that must succeed and be want. */
static void expect_oob(struct peer *p, const char *key, int fd, int flags, char want)
{
	char c = '-', got[2] = {0}, w[2] = {want, 0};
	char rc_key[64];
	snprintf(rc_key, sizeof(rc_key), "%s_rc", key);
	ssize_t n = recv(fd, &c, 1, MSG_OOB | flags);
	expect_rc(p, rc_key, n, 1, 0);
	got[0] = n == 1 ? c : '-';
	expect_str(p, key, got, w);
}

/*
 * A client's part: its sends in order, each with its flags; a step with no
 * bytes is a turn of the server's (the client says its sends are done and
 * waits for the go). Then it waits for the server's close.
 */
struct send_step {
	const char *key;
	const char *data; /* NULL: the server's turn */
	int flags;
};
#define SERVER_TURN {"turn", NULL, 0}

static void run_client(struct peer *p, const struct send_step *steps)
{
	int fd = tcp_connect(p, p->port);
	sync_wait(p);
	for (const struct send_step *st = steps; st->key; st++) {
		if (!st->data) {
			sync_send(p);
			sync_wait(p);
			continue;
		}
		size_t n = strlen(st->data);
		expect_rc(p, st->key, send(fd, st->data, n, st->flags), (long)n, 0);
	}
	sync_send(p);
	char b;
	expect_rc(p, "eof", read(fd, &b, 1), 0, 0);
	close(fd);
}

/* ---- urgent_oob: the byte out of band, reads stopping at the mark ------------- */

static void oob_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	char c;
	/* Never any urgent data: nothing to take, nothing to report. */
	expect_rc(p, "oob_never_urgent", recv(fd, &c, 1, MSG_OOB), -1, EINVAL);
	expect_int(p, "atmark_never_urgent", atmark(fd), 0);
	sync_send(p);
	sync_wait(p); /* the client's send of 0 bytes with MSG_OOB is done */
	expect_int(p, "quiet_after_empty_oob", poll_ms(fd, POLLIN | POLLPRI, QUIET_MS), 0);
	expect_int(p, "select_except_quiet", select_except(fd, 0), 0);
	expect_rc(p, "oob_after_empty_oob", recv(fd, &c, 1, MSG_OOB), -1, EINVAL);
	sync_send(p);
	sync_wait(p); /* "ab", then "!" urgent */
	expect_true(p, "pollpri", wait_for(fd, POLLPRI) & POLLPRI);
	expect_int(p, "poll_in_pri", poll_ms(fd, POLLIN | POLLPRI, 0), POLLIN | POLLPRI);
	expect_int(p, "select_except", select_except(fd, 0), 1);
	expect_int(p, "atmark_before_read", atmark(fd), 0);
	/* FIONREAD counts what a read gets: up to the mark. */
	expect_int(p, "fionread_to_mark", inq(fd), 2);
	expect_oob(p, "oob", fd, 0, '!');
	expect_rc(p, "oob_again", recv(fd, &c, 1, MSG_OOB), -1, EINVAL);
	expect_int(p, "poll_after_oob", poll_ms(fd, POLLIN | POLLPRI, 0), POLLIN);
	expect_int(p, "select_except_after_oob", select_except(fd, 0), 0);
	expect_read(p, "read_to_mark", fd, "ab");
	expect_int(p, "atmark", atmark(fd), 1);
	expect_int(p, "sockatmark", sockatmark(fd), 1);
	/* Only the byte taken out of band is left: a read would block, so no POLLIN. */
	expect_int(p, "fionread_at_mark", inq(fd), 0);
	expect_int(p, "quiet_at_mark", poll_ms(fd, POLLIN | POLLPRI, QUIET_MS), 0);
	sync_send(p);
	sync_wait(p); /* "cd" */
	expect_true(p, "pollin_more", wait_for(fd, POLLIN) & POLLIN);
	/* Still at the mark, FIONREAD says 0 though a read gets "cd". */
	expect_int(p, "fionread_at_mark_more", inq(fd), 0);
	expect_read(p, "read_past_mark", fd, "cd");
	expect_int(p, "atmark_past", atmark(fd), 0);
	expect_rc(p, "oob_past_mark", recv(fd, &c, 1, MSG_OOB), -1, EINVAL);
	close(fd);
}

static void oob_client(struct peer *p)
{
	/* The first send has no byte to make urgent: it marks nothing. */
	static const struct send_step steps[] = {
		{"send_empty_oob", "", MSG_OOB}, SERVER_TURN,
		{"send", "ab", 0}, {"send_oob", "!", MSG_OOB}, SERVER_TURN,
		{"send_more", "cd", 0}, {NULL, NULL, 0},
	};
	run_client(p, steps);
}

/* ---- urgent_inline: SO_OOBINLINE, the byte read in line at the mark ---------- */

static void inline_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	expect_rc(p, "set_oobinline", setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &(int){1}, sizeof(int)),
		  0, 0);
	int on = -1;
	socklen_t len = sizeof(on);
	getsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &on, &len);
	expect_int(p, "get_oobinline", on, 1);
	sync_send(p);
	sync_wait(p); /* "xy", "!" urgent, "z" */
	expect_true(p, "pollpri", wait_for(fd, POLLPRI) & POLLPRI);
	/* All four bytes here before a read can show where it stops. */
	int avail = -1;
	for (int ms = 0; ms < WAIT_MS; ms += 10) {
		if ((avail = inq(fd)) == 4 || avail < 0)
			break;
		sleep_ms(10);
	}
	expect_int(p, "fionread", avail, 4);
	expect_rc(p, "oob_inline", recv(fd, &(char){0}, 1, MSG_OOB), -1, EINVAL);
	expect_int(p, "atmark_before_read", atmark(fd), 0);
	expect_read(p, "read_to_mark", fd, "xy");
	expect_int(p, "atmark", atmark(fd), 1);
	expect_int(p, "poll_at_mark", poll_ms(fd, POLLIN | POLLPRI, 0), POLLIN | POLLPRI);
	expect_read(p, "read_from_mark", fd, "!z");
	expect_int(p, "atmark_past", atmark(fd), 0);
	expect_int(p, "quiet_past_mark", poll_ms(fd, POLLIN | POLLPRI, QUIET_MS), 0);
	close(fd);
}

static void inline_client(struct peer *p)
{
	static const struct send_step steps[] = {
		{"send", "xy", 0}, {"send_oob", "!", MSG_OOB}, {"send_more", "z", 0}, {NULL, NULL, 0},
	};
	run_client(p, steps);
}

/* ---- urgent_sigurg: F_SETOWN alone (no O_ASYNC) brings SIGURG ---------------- */

static volatile sig_atomic_t urg_signals;

static void on_sigurg(int sig)
{
	(void)sig;
	urg_signals++;
}

static void sigurg_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigurg;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGURG, &sa, NULL);
	expect_rc(p, "setown", fcntl(fd, F_SETOWN, getpid()), 0, 0);
	expect_int(p, "getfl_async", fcntl(fd, F_GETFL) & O_ASYNC, 0);
	sync_send(p);
	sync_wait(p); /* "a", not urgent */
	expect_true(p, "pollin", wait_for(fd, POLLIN) & POLLIN);
	sleep_ms(QUIET_MS);
	expect_int(p, "no_sigurg_before_urgent", urg_signals, 0);
	sync_send(p);
	sync_wait(p); /* "!" urgent */
	for (int ms = 0; ms < WAIT_MS && !urg_signals; ms += 10)
		sleep_ms(10);
	sleep_ms(QUIET_MS); /* and no second one */
	expect_int(p, "sigurg", urg_signals, 1);
	expect_true(p, "pollpri", wait_for(fd, POLLPRI) & POLLPRI);
	expect_oob(p, "oob", fd, 0, '!');
	expect_read(p, "read", fd, "a");
	sync_send(p);
	sync_wait(p); /* "z" */
	expect_true(p, "pollin_more", wait_for(fd, POLLIN) & POLLIN);
	expect_read(p, "read_past_mark", fd, "z");
	expect_int(p, "sigurg_still_one", urg_signals, 1);
	close(fd);
}

static void sigurg_client(struct peer *p)
{
	static const struct send_step steps[] = {
		{"send", "a", 0}, SERVER_TURN, {"send_oob", "!", MSG_OOB}, SERVER_TURN,
		{"send_more", "z", 0}, {NULL, NULL, 0},
	};
	run_client(p, steps);
}

/* ---- urgent_unread_then_more: a newer mark replaces one not taken ------------- */

static void again_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	sync_send(p);
	sync_wait(p); /* "a", "!" urgent */
	expect_true(p, "pollpri", wait_for(fd, POLLPRI) & POLLPRI);
	expect_oob(p, "peek_first", fd, MSG_PEEK, '!');
	sync_send(p);
	sync_wait(p); /* "b", "?" urgent */
	/* POLLPRI is up already; the newer mark shows only in the byte. */
	char c = '-';
	for (int ms = 0; ms < WAIT_MS; ms += 10) {
		if (recv(fd, &c, 1, MSG_OOB | MSG_PEEK) == 1 && c == '?')
			break;
		sleep_ms(10);
	}
	expect_oob(p, "oob_newest", fd, 0, '?');
	expect_rc(p, "oob_again", recv(fd, &c, 1, MSG_OOB), -1, EINVAL);
	expect_int(p, "atmark_before_read", atmark(fd), 0);
	/* The first urgent byte is ordinary data now, up to the newer mark. */
	expect_read(p, "read_to_mark", fd, "a!b");
	expect_int(p, "atmark", atmark(fd), 1);
	sync_send(p);
	sync_wait(p); /* "c" */
	expect_true(p, "pollin_more", wait_for(fd, POLLIN) & POLLIN);
	expect_read(p, "read_past_mark", fd, "c");
	close(fd);
}

static void again_client(struct peer *p)
{
	static const struct send_step steps[] = {
		{"send", "a", 0}, {"send_oob", "!", MSG_OOB}, SERVER_TURN,
		{"send_2", "b", 0}, {"send_oob_2", "?", MSG_OOB}, SERVER_TURN,
		{"send_more", "c", 0}, {NULL, NULL, 0},
	};
	run_client(p, steps);
}

/* ---- urgent_async_waitall: O_ASYNC's band, MSG_WAITALL at the mark ---------- */

static volatile sig_atomic_t rt_signals;
static volatile long rt_bands;

static void on_rt(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	rt_signals++;
	rt_bands |= si->si_band;
}

static void waitall_server(struct peer *p)
{
	int fd = tcp_accept(p, p->lfd);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_rt;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGRTMIN + 3, &sa, NULL);
	signal(SIGURG, SIG_IGN);
	expect_rc(p, "setown", fcntl(fd, F_SETOWN, getpid()), 0, 0);
	expect_rc(p, "setsig", fcntl(fd, F_SETSIG, SIGRTMIN + 3), 0, 0);
	expect_rc(p, "set_async", fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC), 0, 0);
	sync_send(p);
	sync_wait(p); /* "ab", then "!" urgent */
	expect_true(p, "pollpri", wait_for(fd, POLLPRI) & POLLPRI);
	for (int ms = 0; ms < WAIT_MS && !(rt_bands & POLLPRI); ms += 10)
		sleep_ms(10);
	expect_true(p, "band_pri", (rt_bands & POLLPRI) != 0);
	expect_true(p, "band_in", (rt_bands & POLLIN) != 0);
	char buf[16] = {0};
	/* Even a read that waits for all it asked returns at the mark. */
	expect_rc(p, "waitall_to_mark", recv(fd, buf, sizeof(buf), MSG_WAITALL), 2, 0);
	expect_str(p, "waitall_bytes", buf, "ab");
	expect_oob(p, "oob", fd, 0, '!');
	/* The byte taken is still in the queue until a read passes it; closed
	 * before, the connection would reset. */
	set_nonblock(p, fd, true);
	expect_rc(p, "read_past_taken_byte", read(fd, buf, 1), -1, EAGAIN);
	close(fd);
}

static void waitall_client(struct peer *p)
{
	static const struct send_step steps[] = {
		{"send", "ab", 0}, {"send_oob", "!", MSG_OOB}, {NULL, NULL, 0},
	};
	run_client(p, steps);
}

const struct scenario scen_urgent[] = {
	{"urgent_oob", oob_server, oob_client, false},
	{"urgent_inline", inline_server, inline_client, false},
	{"urgent_sigurg", sigurg_server, sigurg_client, false},
	{"urgent_unread_then_more", again_server, again_client, false},
	{"urgent_async_waitall", waitall_server, waitall_client, false},
	{NULL, NULL, NULL, false},
};
