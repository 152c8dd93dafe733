/* A stream's end when its session ends (stream_internal.h). */
#include "autoconfig.h"

#include "preload/stream_internal.h"

#include <errno.h>
#include <sys/epoll.h>

bool stream_end_moving(const struct stream *s)
{
	return s->moving && s->move_cookie != 0;
}

int stream_end_error(const struct stream *s, int err)
{
	if (stream_fin_in(s))
		return 0;
	switch (err) {
	case -EOWNERDEAD:
		/* As tcp_close: a socket closed with data unread sends RST,
		 * else FIN. tx_acked is as far as the peer said it read; the
		 * word rides on its next message or wait, so a peer killed
		 * between reading and waiting again reads as a reset. */
		return s->tx_acked < s->tx_seq ? ECONNRESET : 0;
	case -ETIMEDOUT:
		return ETIMEDOUT; /* as tcp_write_err */
	default:
		return ECONNRESET;
	}
}

void stream_end(struct stream *s, int err)
{
	int e = stream_end_error(s, err);
	/* Before stream_fail, whose notice carries the readiness it gives. A
	 * stream ended already keeps what its first end said (a session that
	 * went down, then the refusal of a request on it). */
	if (!s->reset) {
		s->write_draws_reset = e == 0 && !s->wr_shut;
		s->end_clean = e == 0;
	}
	stream_fail(s, e);
}

ssize_t stream_end_write(struct stream *s, size_t len)
{
	/* As tcp_reset in CLOSE_WAIT: the reset after the peer's FIN is a
	 * broken pipe. */
	s->write_draws_reset = false;
	if (!s->err)
		s->err = EPIPE;
	stream_notify(s, EPOLLOUT | EPOLLERR | EPOLLHUP);
	return (ssize_t)len;
}
