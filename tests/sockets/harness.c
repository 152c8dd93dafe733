/*
 * Driver and helpers of the socket-semantics program.
 *
 *   sockcheck [-v] [SCENARIO...]      run scenarios (all by default), print
 *                                     each role's lines, TAP status, summary
 *   sockcheck --list                  list scenario names
 *   sockcheck --role R --scenario S   internal: one role of one scenario
 *
 * The driver forks and re-executes itself for both roles, so an LD_PRELOAD
 * in its environment reaches both ends, each a fresh process. It talks to
 * the roles only through pipes and never opens a socket itself.
 */
#include "autoconfig.h"

#include "tests/sockets/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Fixed fd numbers the roles find their pipes at after exec. */
enum { SYNC_IN_FD = 100, SYNC_OUT_FD = 101 };
/* A role that takes longer than this is hung: the scenario fails. */
enum { ROLE_DEADLINE_MS = 30000, SYNC_DEADLINE_MS = 20000 };

static const struct scenario *const *tables(void)
{
	static const struct scenario *const all[] = {scen_stream, scen_flow, scen_options, scen_ready, scen_misc,
						      scen_fortify, scen_handover, scen_liveness, scen_bind,
						      scen_signals, scen_urgent, scen_errqueue, scen_lowat,
						      NULL};
	return all;
}

static const struct scenario *scenario_find(const char *name)
{
	for (const struct scenario *const *t = tables(); *t; t++)
		for (const struct scenario *s = *t; s->name; s++)
			if (!strcmp(s->name, name))
				return s;
	return NULL;
}

/* ---- results ---------------------------------------------------------- */

static void result_line(struct peer *p, const char *key, const char *actual, const char *want)
{
	bool ok = !strcmp(actual, want);
	printf("%s %s %s = %s%s%s\n", p->scenario, p->role, key, actual,
	       ok ? "" : "   # FAIL, kernel gives ", ok ? "" : want);
	fflush(stdout);
	if (!ok)
		p->failures++;
}

static void rc_text(char *buf, size_t cap, long rc, int err)
{
	if (rc < 0) {
		const char *name = strerrorname_np(err);
		snprintf(buf, cap, "-1 %s", name ? name : "E?");
	} else {
		snprintf(buf, cap, "%ld", rc);
	}
}

void expect_rc(struct peer *p, const char *key, long rc, long want, int want_errno)
{
	int err = errno;
	char a[64], w[64];
	rc_text(a, sizeof(a), rc, err);
	rc_text(w, sizeof(w), want, want_errno);
	result_line(p, key, a, w);
}

void expect_int(struct peer *p, const char *key, long actual, long want)
{
	char a[32], w[32];
	snprintf(a, sizeof(a), "%ld", actual);
	snprintf(w, sizeof(w), "%ld", want);
	result_line(p, key, a, w);
}

void expect_true(struct peer *p, const char *key, bool cond)
{
	result_line(p, key, cond ? "yes" : "no", "yes");
}

void expect_str(struct peer *p, const char *key, const char *actual, const char *want)
{
	result_line(p, key, actual, want);
}

void die(struct peer *p, const char *what)
{
	printf("%s %s FATAL %s: %s\n", p->scenario, p->role, what, strerror(errno));
	fflush(stdout);
	exit(1);
}

/* ---- sync pipes ------------------------------------------------------- */

static void sync_read(struct peer *p, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		struct pollfd pfd = {.fd = p->sync_in, .events = POLLIN};
		int n = poll(&pfd, 1, SYNC_DEADLINE_MS);
		if (n == 0) {
			errno = ETIMEDOUT;
			die(p, "waiting for the other role");
		}
		if (n < 0 && errno == EINTR)
			continue;
		ssize_t r = read(p->sync_in, (char *)buf + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = EPIPE;
			die(p, "the other role went away");
		}
		got += (size_t)r;
	}
}

void sync_send_data(struct peer *p, const void *buf, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t w = write(p->sync_out, (const char *)buf + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			die(p, "sync write");
		done += (size_t)w;
	}
}

void sync_recv_data(struct peer *p, void *buf, size_t len)
{
	sync_read(p, buf, len);
}

void sync_send(struct peer *p)
{
	sync_send_data(p, "s", 1);
}

void sync_wait(struct peer *p)
{
	char c;
	sync_read(p, &c, 1);
}

/* ---- socket helpers --------------------------------------------------- */

int tcp_listener(struct peer *p, uint16_t port, int backlog)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die(p, "socket");
	int one = 1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
		die(p, "SO_REUSEADDR");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)))
		die(p, "bind");
	if (listen(fd, backlog))
		die(p, "listen");
	return fd;
}

int tcp_connect(struct peer *p, uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die(p, "socket");
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	while (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		if (errno != EINTR)
			die(p, "connect");
	}
	return fd;
}

int tcp_accept(struct peer *p, int lfd)
{
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		if (fd >= 0)
			return fd;
		if (errno != EINTR)
			die(p, "accept");
	}
}

uint16_t sock_port(struct peer *p, int fd)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	if (getsockname(fd, (struct sockaddr *)&a, &len))
		die(p, "getsockname");
	return ntohs(a.sin_port);
}

void set_nonblock(struct peer *p, int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK))
		die(p, "fcntl O_NONBLOCK");
}

void pattern_fill(unsigned char *buf, size_t len, size_t offset)
{
	for (size_t i = 0; i < len; i++) {
		size_t x = offset + i;
		buf[i] = (unsigned char)(x * 131u + (x >> 8) * 7u + (x >> 16));
	}
}

bool pattern_check(const unsigned char *buf, size_t len, size_t offset)
{
	for (size_t i = 0; i < len; i++) {
		size_t x = offset + i;
		if (buf[i] != (unsigned char)(x * 131u + (x >> 8) * 7u + (x >> 16)))
			return false;
	}
	return true;
}

size_t write_all(struct peer *p, int fd, const void *buf, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t w = send(fd, (const char *)buf + done, len - done, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			die(p, "write_all");
		done += (size_t)w;
	}
	return done;
}

size_t read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = read(fd, (char *)buf + got, len - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

short wait_for(int fd, short events)
{
	struct pollfd pfd = {.fd = fd, .events = events};
	for (;;) {
		int n = poll(&pfd, 1, 5000);
		if (n < 0 && errno == EINTR)
			continue;
		return n > 0 ? pfd.revents : 0;
	}
}

int ep_wait(int ep, struct epoll_event *ev, int max, int ms)
{
	for (;;) {
		int n = epoll_wait(ep, ev, max, ms);
		if (n >= 0 || errno != EINTR)
			return n;
	}
}

void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* ---- one role --------------------------------------------------------- */

static int role_main(const char *role, const char *name)
{
	const struct scenario *s = scenario_find(name);
	if (!s) {
		fprintf(stderr, "sockcheck: no scenario %s\n", name);
		return 2;
	}
	struct peer p = {.scenario = s->name, .role = role, .sync_in = SYNC_IN_FD,
			 .sync_out = SYNC_OUT_FD, .lfd = -1};
	/* A write to a dead peer must show up as EPIPE in the checks, not kill us. */
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(role, "server")) {
		p.lfd = tcp_listener(&p, 0, 64);
		p.port = sock_port(&p, p.lfd);
		sync_send_data(&p, &p.port, sizeof(p.port));
		s->server(&p);
		close(p.lfd);
	} else {
		sync_recv_data(&p, &p.port, sizeof(p.port));
		s->client(&p);
	}
	fflush(stdout);
	return p.failures ? 1 : 0;
}

/* ---- driver ----------------------------------------------------------- */

struct child {
	pid_t pid;
	int out;          /* read end of its stdout */
	char *text;
	size_t len, cap;
	int status;
};

static void child_spawn(struct child *c, const char *self, const char *role, const char *name,
			int sync_in, int sync_out)
{
	int out[2];
	if (pipe2(out, O_CLOEXEC)) {
		perror("pipe2");
		exit(2);
	}
	fflush(stdout);
	c->pid = fork();
	if (c->pid < 0) {
		perror("fork");
		exit(2);
	}
	if (c->pid == 0) {
		if (dup2(sync_in, SYNC_IN_FD) < 0 || dup2(sync_out, SYNC_OUT_FD) < 0 ||
		    dup2(out[1], STDOUT_FILENO) < 0)
			_exit(127);
		execl(self, self, "--role", role, "--scenario", name, (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	c->out = out[0];
	c->text = NULL;
	c->len = c->cap = 0;
}

static void child_drain(struct child *c)
{
	char buf[4096];
	ssize_t n = read(c->out, buf, sizeof(buf));
	if (n <= 0) {
		close(c->out);
		c->out = -1;
		return;
	}
	if (c->len + (size_t)n + 1 > c->cap) {
		c->cap = (c->len + (size_t)n + 1) * 2;
		c->text = realloc(c->text, c->cap);
		if (!c->text)
			abort();
	}
	memcpy(c->text + c->len, buf, (size_t)n);
	c->len += (size_t)n;
	c->text[c->len] = '\0';
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/*
 * With FERRY_TEST_PATHS=FILE (and FERRY_STATS, as check.sh sets), appends the
 * path each role's connections took, from the counters ferry wrote at its
 * exit: "scenario role connected=N accepted=N fallbacks=N kernel_accepts=N",
 * or "scenario role no-counters". Kept out of stdout, which must match the
 * kernel run line for line.
 */
static long stats_key(const char *json, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	const char *at = strstr(json, pat);
	return at ? strtol(at + strlen(pat), NULL, 10) : -1;
}

static void paths_record(const struct scenario *s, const char *role, pid_t pid)
{
	const char *out = getenv("FERRY_TEST_PATHS"), *tmpl = getenv("FERRY_STATS");
	if (!out || !tmpl)
		return;
	char path[1024];
	size_t n = 0;
	for (const char *c = tmpl; *c && n + 16 < sizeof(path); c++) {
		if (c[0] == '%' && c[1] == 'p') {
			n += (size_t)snprintf(path + n, sizeof(path) - n, "%d", (int)pid);
			c++;
		} else {
			path[n++] = *c;
		}
	}
	path[n] = '\0';
	char json[8192] = "";
	FILE *f = fopen(path, "r");
	if (f) {
		size_t len = fread(json, 1, sizeof(json) - 1, f);
		json[len] = '\0';
		fclose(f);
	}
	FILE *o = fopen(out, "a");
	if (!o)
		return;
	if (json[0])
		fprintf(o, "%s %s connected=%ld accepted=%ld fallbacks=%ld kernel_accepts=%ld\n", s->name,
			role, stats_key(json, "streams_connected"), stats_key(json, "streams_accepted"),
			stats_key(json, "fallbacks"), stats_key(json, "kernel_accepts"));
	else
		fprintf(o, "%s %s no-counters\n", s->name, role);
	fclose(o);
}

/* Runs both roles; returns true when both passed. */
static bool scenario_run(const char *self, const struct scenario *s, bool verbose)
{
	int c2s[2], s2c[2];
	if (pipe2(c2s, O_CLOEXEC) || pipe2(s2c, O_CLOEXEC)) {
		perror("pipe2");
		exit(2);
	}
	struct child kids[2]; /* 0 server, 1 client */
	child_spawn(&kids[0], self, "server", s->name, c2s[0], s2c[1]);
	child_spawn(&kids[1], self, "client", s->name, s2c[0], c2s[1]);
	close(c2s[0]);
	close(c2s[1]);
	close(s2c[0]);
	close(s2c[1]);

	long deadline = now_ms() + ROLE_DEADLINE_MS;
	bool timed_out = false;
	while (kids[0].out >= 0 || kids[1].out >= 0) {
		struct pollfd pfd[2];
		int n = 0, map[2];
		for (int i = 0; i < 2; i++) {
			if (kids[i].out >= 0) {
				pfd[n] = (struct pollfd){.fd = kids[i].out, .events = POLLIN};
				map[n++] = i;
			}
		}
		long left = deadline - now_ms();
		if (left <= 0) {
			timed_out = true;
			break;
		}
		int r = poll(pfd, (nfds_t)n, (int)left);
		if (r < 0 && errno != EINTR) {
			perror("poll");
			exit(2);
		}
		for (int i = 0; i < n && r > 0; i++)
			if (pfd[i].revents)
				child_drain(&kids[map[i]]);
	}
	bool hung[2] = {false, false};
	for (int i = 0; i < 2; i++) {
		/* Only a role still running at the deadline is the one that hung. */
		if (timed_out && waitpid(kids[i].pid, &kids[i].status, WNOHANG) == 0) {
			hung[i] = true;
			kill(kids[i].pid, SIGKILL);
		}
		if (!timed_out || hung[i])
			while (waitpid(kids[i].pid, &kids[i].status, 0) < 0 && errno == EINTR)
				;
		if (kids[i].out >= 0) {
			/* What it printed before the deadline; a grandchild may hold the pipe. */
			fcntl(kids[i].out, F_SETFL, O_NONBLOCK);
			while (kids[i].out >= 0)
				child_drain(&kids[i]);
		}
	}

	bool ok = !timed_out;
	for (int i = 1; i >= 0; i--) {
		struct child *c = &kids[i];
		const char *role = i ? "client" : "server";
		if (c->text)
			fputs(c->text, stdout);
		int st = c->status;
		bool died_as_planned = i == 0 && s->server_dies && WIFSIGNALED(st) &&
				       WTERMSIG(st) == SIGKILL;
		if (hung[i]) {
			printf("%s %s TIMEOUT after %d ms   # FAIL\n", s->name, role, ROLE_DEADLINE_MS);
		} else if (WIFSIGNALED(st) && !died_as_planned) {
			printf("%s %s killed by signal %s   # FAIL\n", s->name, role,
			       sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
			ok = false;
		} else if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
			if (verbose || !c->text || !strstr(c->text, "FAIL"))
				printf("%s %s exit status %d   # FAIL\n", s->name, role,
				       WEXITSTATUS(st));
			ok = false;
		}
		free(c->text);
		paths_record(s, role, c->pid);
	}
	return ok;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "--role") && !strcmp(argv[3], "--scenario"))
		return role_main(argv[2], argv[4]);

	bool verbose = false;
	int first = 1;
	if (argc > 1 && !strcmp(argv[1], "--list")) {
		for (const struct scenario *const *t = tables(); *t; t++)
			for (const struct scenario *s = *t; s->name; s++)
				puts(s->name);
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "-v")) {
		verbose = true;
		first = 2;
	}
	/* Re-exec through /proc so a relative argv[0] cannot miss. */
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		perror("readlink /proc/self/exe");
		return 2;
	}
	self[n] = '\0';
	signal(SIGPIPE, SIG_IGN);

	int passed = 0, failed = 0, index = 0;
	for (const struct scenario *const *t = tables(); *t; t++) {
		for (const struct scenario *s = *t; s->name; s++) {
			bool wanted = first >= argc;
			for (int i = first; i < argc; i++)
				if (!strcmp(argv[i], s->name))
					wanted = true;
			if (!wanted)
				continue;
			bool ok = scenario_run(self, s, verbose);
			printf("%sok %d - %s\n", ok ? "" : "not ", ++index, s->name);
			fflush(stdout);
			if (ok)
				passed++;
			else
				failed++;
		}
	}
	printf("1..%d\n# %d passed, %d failed\n", index, passed, failed);
	return failed ? 1 : 0;
}
