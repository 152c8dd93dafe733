/* Relays for processes that cannot run ferry: see relay.h. */
#include "autoconfig.h"

#include "preload/relay.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/sock.h"
#include "preload/stream.h"
#include "transport/rpc.h"
#include "transport/sys.h"

#define RELAY_BUF (64u * 1024u)
/* How often the stream side is looked at while a relay runs: its bytes
 * arrive on the endpoint, which wakes nobody here (an interactive sshd
 * session, the case this serves, never notices a millisecond). */
#define RELAY_TICK_MS 1

/*
 * Bytes for the confined process are copied to it, not taken from the
 * stream: the stream lets go of them only once that process has read them
 * (what it was sent, less what waits unread at its end, which a duplicate
 * of that end shows: FIONREAD). So what it never reads -- sshd's
 * pre-authentication child exits once the client is in, with the client's
 * next packets already sent -- stays in the stream for the next holder, as
 * it would in a kernel socket's queue.
 */
struct relay {
	struct relay *next;
	struct stream *s;
	struct ffile *pin;
	int fd;        /* our end */
	int their_end; /* a duplicate of the confined process's end, or -1 */
	int pidfd;     /* that process: the relay ends with it (-1: at EOF) */
	bool told_eof; /* the stream ended, and the confined process was told */
	bool closed;   /* ours, at exit: FIN sent, waiting for all to be delivered */
	uint32_t up_off, up_len; /* from the confined process, for the peer */
	uint32_t sent;           /* copied to it, not yet let go of by the stream */
	uint8_t up[RELAY_BUF], down[2 * RELAY_BUF];
};

/* Only the handover thread touches the list (and fork's child, alone). */
static struct relay *relays;
/* Atomic: relays this process runs for itself, and whether it is exiting
 * (their ends are then flushed and their streams ended, relay_exit_wait). */
static int relays_own;
static int relays_exiting;

int relay_add(struct stream *s, struct ffile *pin, int fd, int their_end, int pidfd)
{
	struct relay *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->s = s;
	r->pin = pin;
	r->fd = fd;
	r->their_end = their_end;
	r->pidfd = pidfd;
	r->next = relays;
	relays = r;
	ferry_lock();
	stream_relay_mark(s, true);
	ferry_unlock();
	if (their_end < 0)
		__atomic_add_fetch(&relays_own, 1, __ATOMIC_RELEASE);
	return 0;
}

bool relay_holds(const struct stream *s)
{
	for (const struct relay *r = relays; r; r = r->next)
		if (r->s == s)
			return true;
	return false;
}

int relay_poll(struct pollfd *p, int max, int *timeout_ms)
{
	int n = 0;
	*timeout_ms = relays ? RELAY_TICK_MS : -1;
	for (struct relay *r = relays; r && n + 1 < max; r = r->next) {
		p[n++] = (struct pollfd){.fd = r->fd,
					 .events = r->up_off == r->up_len ? POLLIN : 0};
		if (r->pidfd >= 0)
			p[n++] = (struct pollfd){.fd = r->pidfd, .events = POLLIN};
	}
	return n;
}

/* Whether the confined process is gone (its pidfd readable). */
static bool relay_gone(const struct relay *r)
{
	struct pollfd p = {.fd = r->pidfd, .events = POLLIN};
	return r->pidfd >= 0 && sys()->poll(&p, 1, 0) > 0;
}

/* A relay of our own whose end was closed, or at exit, all it was written
 * sent: the stream ends (FIN), and the relay stays until every byte is
 * delivered, so an exit waits for them (relay_exit_wait), as the kernel
 * delivers a closed socket's buffer after the process is gone. False when
 * that is done. */
static bool relay_close_own(struct relay *r)
{
	ferry_lock();
	stream_run_once(ferry.rpc);
	if (!r->closed) {
		/* The stream may be freed once its FIN is answered: let go first. */
		stream_relay_mark(r->s, false);
		struct fsock *sk = r->pin ? r->pin->priv : NULL;
		if (sk && sk->stream == r->s) {
			stream_close(ferry.rpc, r->s);
			sk->stream = NULL;
		}
		r->closed = true;
	}
	bool undelivered = stream_delivery_pending(ferry.rpc);
	ferry_unlock();
	return undelivered;
}

/* One relay's turn: false when it is over. */
static bool relay_turn(struct relay *r)
{
	const struct sys_fns *c = sys();
	/* Gone: what it had not read stays in the stream, and what it wrote
	 * before it went still goes to the peer (sshd's child writes the
	 * client's welcome, then exits), as a kernel socket's buffer would. */
	bool gone = relay_gone(r) ||
		    (r->their_end < 0 && __atomic_load_n(&relays_exiting, __ATOMIC_ACQUIRE));
	if (r->up_off == r->up_len) {
		ssize_t n = r->closed ? 0 : c->recv(r->fd, r->up, sizeof(r->up), MSG_DONTWAIT);
		bool ended = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
		if (r->their_end < 0 && (ended || (n < 0 && gone)))
			return relay_close_own(r); /* closed, or exiting: FIN, then delivery */
		if (ended || (n < 0 && gone))
			return false; /* its end closed, or all it wrote before it went went */
		if (n > 0) {
			r->up_off = 0;
			r->up_len = (uint32_t)n;
		}
	}
	/* What the confined process has read since the last turn. */
	uint32_t read_there = r->sent;
	int unread = 0;
	if (r->their_end >= 0 && c->ioctl(r->their_end, FIONREAD, &unread) == 0 && unread >= 0 &&
	    (uint32_t)unread <= r->sent)
		read_there = r->sent - (uint32_t)unread;
	bool alive = true;
	ssize_t peeked = 0;
	ferry_lock();
	stream_run_once(ferry.rpc);
	if (r->up_off < r->up_len) {
		struct iovec v = {r->up + r->up_off, r->up_len - r->up_off};
		ssize_t w = stream_send(ferry.rpc, r->s, &v, 1);
		if (w > 0)
			r->up_off += (uint32_t)w;
		else if (w != -EAGAIN)
			alive = false;
	}
	if (alive && read_there) {
		struct iovec v = {NULL, read_there};
		ssize_t n = stream_recv(ferry.rpc, r->s, &v, 1, MSG_TRUNC);
		if (n > 0)
			r->sent -= (uint32_t)n;
	}
	if (gone) {
		r->sent = 0; /* what it left unread was never taken from the stream */
		ferry_unlock();
		return alive; /* back for the rest of what it wrote */
	}
	if (alive && r->sent < RELAY_BUF) {
		struct iovec v = {r->down, r->sent + RELAY_BUF};
		peeked = stream_recv(ferry.rpc, r->s, &v, 1, MSG_PEEK);
		if (peeked < 0 && peeked != -EAGAIN)
			alive = false;
	}
	ferry_unlock();
	if (peeked > (ssize_t)r->sent) {
		ssize_t w = c->send(r->fd, r->down + r->sent, (size_t)peeked - r->sent,
				    MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w > 0)
			r->sent += (uint32_t)w;
		else if (w < 0 && errno != EAGAIN && errno != EINTR)
			return false;
	}
	if (alive && peeked == 0 && r->sent == 0 && !r->told_eof) {
		c->shutdown(r->fd, SHUT_WR); /* the stream ended: the confined process reads the end */
		r->told_eof = true;
	}
	return alive;
}

/* The relay's descriptors, closed; the relay is freed. */
static void relay_release(struct relay *r)
{
	const struct sys_fns *c = sys();
	c->close(r->fd);
	if (r->their_end >= 0)
		c->close(r->their_end);
	if (r->pidfd >= 0)
		c->close(r->pidfd);
	free(r);
}

static void relay_free(struct relay *r)
{
	/* Our own process's confined end was closed: its connection ends here,
	 * as the close would have ended it (ferry is off in this process by
	 * now, so the file's release would leave the stream be). */
	ferry_lock();
	if (!r->closed)
		stream_relay_mark(r->s, false);
	if (r->their_end < 0 && r->pin && !r->closed) {
		struct fsock *sk = r->pin->priv;
		if (sk && sk->stream == r->s) {
			stream_close(ferry.rpc, r->s);
			sk->stream = NULL;
		}
	}
	ferry_unlock();
	if (r->their_end < 0 && r->pin)
		__atomic_sub_fetch(&relays_own, 1, __ATOMIC_RELEASE);
	if (r->pin)
		ffile_put(&fdtab, r->pin);
	relay_release(r);
}

void relay_drop(const struct stream *s)
{
	for (struct relay **pp = &relays; *pp;) {
		struct relay *r = *pp;
		if (r->s != s) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		relay_free(r);
	}
}

void relay_pump(void)
{
	for (struct relay **pp = &relays; *pp;) {
		struct relay *r = *pp;
		if (relay_turn(r)) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		relay_free(r);
	}
}

void relay_exit_wait(uint64_t max_ns)
{
	if (!__atomic_load_n(&relays_own, __ATOMIC_ACQUIRE))
		return;
	__atomic_store_n(&relays_exiting, 1, __ATOMIC_RELEASE);
	/* Naps only: the thread that exits may be under a seccomp filter. */
	for (uint64_t waited = 0; __atomic_load_n(&relays_own, __ATOMIC_ACQUIRE) && waited < max_ns;
	     waited += 1000000) {
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

void relay_fork_child(void)
{
	/* Nothing of the parent's is touched: its streams, files and endpoint
	 * lock are not the child's (fork.c). */
	__atomic_store_n(&relays_own, 0, __ATOMIC_RELAXED);
	while (relays) {
		struct relay *r = relays;
		relays = r->next;
		relay_release(r);
	}
}
