/* A stream's end when its session ends (stream_end.h). */
#include "autoconfig.h"

#include "preload/stream_end.h"

#include <errno.h>

#include "preload/stream.h"

bool stream_end_moving(const struct stream *s)
{
	return s->moving && s->move_cookie != 0;
}

int stream_end_error(const struct stream *s, int err)
{
	if (s->rx_fin && s->rx.tail >= s->fin_seq)
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
