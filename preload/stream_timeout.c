/*
 * Keepalive and TCP_USER_TIMEOUT on streams (stream.h): the kernel's
 * per-socket patience, for peers on another host. A keepalive probe is a
 * WINDOW the peer must answer; its answer, like any word of the peer on
 * the stream, counts as heard.
 */
#include "autoconfig.h"

#include "preload/stream_internal.h"

#include <errno.h>
#include <time.h>

#include "preload/localaddr.h"

/* How often the timed streams are looked at: the kernel's keepalive and
 * user timeouts count in seconds and milliseconds, set by the application;
 * a tenth of a second keeps an idle process's wake-ups few. */
#define STREAM_TIMED_CHECK_NS (100ull * 1000000ull)

static uint64_t timed_next_ns;

static uint64_t timed_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Whether s's peer lives on another host: one here is watched by its
 * process, and its kernel would answer probes even while it is stopped. */
static bool timed_peer_remote(const struct stream *s)
{
	struct sockaddr_storage origin;
	return rpc_session_origin(s->rpc, s->session, &origin) &&
	       !localaddr_is_local((struct sockaddr *)&origin);
}

void stream_set_timeouts(struct stream *s, uint64_t ka_idle_ns, uint64_t ka_wait_ns,
			 uint64_t user_timeout_ns)
{
	s->ka_idle_ns = ka_idle_ns;
	s->ka_wait_ns = ka_wait_ns;
	s->user_timeout_ns = user_timeout_ns;
	bool timed = (ka_idle_ns || user_timeout_ns) && timed_peer_remote(s);
	if (timed && !s->timed) {
		s->heard_ns = timed_now_ns();
		s->probe_ns = 0;
		s->tx_wait_ns = s->tx_delivered < s->tx_seq ? s->heard_ns : 0;
		__atomic_add_fetch(&streams.ntimed, 1, __ATOMIC_RELAXED);
	} else if (!timed && s->timed) {
		__atomic_sub_fetch(&streams.ntimed, 1, __ATOMIC_RELAXED);
	}
	s->timed = timed;
}

bool stream_timed_pending(void)
{
	return __atomic_load_n(&streams.ntimed, __ATOMIC_RELAXED) != 0;
}

void stream_timed_forget(struct stream *s)
{
	if (s->timed)
		__atomic_sub_fetch(&streams.ntimed, 1, __ATOMIC_RELAXED);
	s->timed = false;
}

void stream_timed_heard(struct stream *s, bool received)
{
	if (!s->timed)
		return;
	s->heard_ns = timed_now_ns();
	s->probe_ns = 0;
	if (received)
		s->tx_wait_ns = s->tx_delivered < s->tx_seq ? s->heard_ns : 0;
}

void stream_timed_sent(struct stream *s)
{
	if (s->timed && !s->tx_wait_ns)
		s->tx_wait_ns = timed_now_ns();
}

/* As tcp_write_timeout: the connection is given up, the peer told. */
static void timed_out(struct rpc *rpc, struct stream *s)
{
	stream_send_ctl(rpc, s, STREAM_REQ_RESET, 0, stream_ctl_cont);
	stream_fail(s, ETIMEDOUT);
	stream_timed_forget(s);
}

static void timed_one(struct rpc *rpc, struct stream *s, uint64_t now)
{
	if (s->reset || s->state != STREAM_OPEN || s->moving) {
		stream_timed_forget(s);
		return;
	}
	/* TCP_USER_TIMEOUT bounds unacknowledged bytes, and with keepalive
	 * replaces the probes' count (tcp(7)). */
	if (s->user_timeout_ns && s->tx_wait_ns && now - s->tx_wait_ns >= s->user_timeout_ns) {
		timed_out(rpc, s);
		return;
	}
	if (!s->ka_idle_ns)
		return;
	if (s->probe_ns) {
		uint64_t wait = s->user_timeout_ns ? s->user_timeout_ns : s->ka_wait_ns;
		if (now - s->probe_ns >= wait)
			timed_out(rpc, s);
		return;
	}
	if (now - s->heard_ns >= s->ka_idle_ns &&
	    stream_send_ctl(rpc, s, STREAM_REQ_WINDOW, s->rx.head, stream_ctl_cont) == 0)
		s->probe_ns = now;
}

void stream_timed_check(struct rpc *rpc)
{
	uint64_t now = timed_now_ns();
	if (now < timed_next_ns)
		return;
	timed_next_ns = now + STREAM_TIMED_CHECK_NS;
	for (uint32_t i = 0; i < streams.used; i++) {
		struct stream *s = streams.slots[i];
		if (s && s->timed && s->rpc == rpc)
			timed_one(rpc, s, now);
	}
}
