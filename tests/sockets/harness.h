/*
 * Socket-semantics scenarios: each runs as a server and a client process,
 * exec'd afresh so LD_PRELOAD (ferry or not) applies to both ends alike.
 * Every check prints one canonical line; the kernel run and the ferry run
 * must print the same lines, and each check also asserts the kernel's value.
 */
#ifndef SOCKETS_HARNESS_H
#define SOCKETS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct peer {
	const char *scenario;
	const char *role;    /* "server" or "client" */
	int sync_in;         /* pipe from the other role */
	int sync_out;        /* pipe to the other role */
	uint16_t port;       /* the server's listening port (both roles) */
	int lfd;             /* server: listening socket, 127.0.0.1:port */
	int failures;
};

struct scenario {
	const char *name;
	void (*server)(struct peer *p);
	void (*client)(struct peer *p);
	bool server_dies;    /* the server ends by SIGKILL on purpose */
};

/* Scenario tables, each ended by an entry with a NULL name. */
extern const struct scenario scen_stream[];
extern const struct scenario scen_options[];
extern const struct scenario scen_ready[];
extern const struct scenario scen_fortify[];
extern const struct scenario scen_misc[];
extern const struct scenario scen_flow[];
extern const struct scenario scen_handover[];
extern const struct scenario scen_liveness[];
extern const struct scenario scen_bind[];
extern const struct scenario scen_signals[];
extern const struct scenario scen_urgent[];
extern const struct scenario scen_errqueue[];
extern const struct scenario scen_lowat[];

/* Synchronisation with the other role over pipes (never sockets). */
void sync_send(struct peer *p);
void sync_wait(struct peer *p);
void sync_send_data(struct peer *p, const void *buf, size_t len);
void sync_recv_data(struct peer *p, void *buf, size_t len);

/* Canonical result lines. Each prints "scenario role key = value". */
void expect_rc(struct peer *p, const char *key, long rc, long want, int want_errno);
void expect_int(struct peer *p, const char *key, long actual, long want);
void expect_true(struct peer *p, const char *key, bool cond);
void expect_str(struct peer *p, const char *key, const char *actual, const char *want);
/* Aborts the role: a step every later check depends on went wrong. */
void die(struct peer *p, const char *what) __attribute__((noreturn));

/* Helpers: blocking unless stated; die on failure. */
int tcp_connect(struct peer *p, uint16_t port);
int tcp_accept(struct peer *p, int lfd);
int tcp_listener(struct peer *p, uint16_t port, int backlog); /* 127.0.0.1, SO_REUSEADDR */
uint16_t sock_port(struct peer *p, int fd);
void set_nonblock(struct peer *p, int fd, bool on);
/* Fills buf with a pattern that depends on the absolute stream offset. */
void pattern_fill(unsigned char *buf, size_t len, size_t offset);
bool pattern_check(const unsigned char *buf, size_t len, size_t offset);
/* Writes all of buf (blocking socket); returns bytes written. */
size_t write_all(struct peer *p, int fd, const void *buf, size_t len);
/* Reads exactly len bytes unless EOF/error; returns bytes read. */
size_t read_full(int fd, void *buf, size_t len);
/* Waits until fd polls for events (5 s bound); returns revents or 0. */
short wait_for(int fd, short events);
/*
 * A "waitable" check: the event must come (bounded wait), or must not come
 * (short wait, since data the peer already sent has arrived by then).
 */
enum { WAIT_MS = 5000, QUIET_MS = 150 };
struct epoll_event;
/* epoll_wait, again after EINTR. */
int ep_wait(int ep, struct epoll_event *ev, int max, int ms);
void sleep_ms(unsigned ms);

#endif
