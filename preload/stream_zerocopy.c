/*
 * MSG_ZEROCOPY on a stream. ferry copies every send into its own buffers,
 * so the application's buffer is free when the call returns; a program
 * that asked for zero copy still waits for the kernel's word on its error
 * queue before it reuses a buffer, so ferry gives that word at once, as
 * the kernel does for a send it copied (SO_EE_CODE_ZEROCOPY_COPIED): one
 * notice per run of sends not yet read, their numbers as a range.
 */
#include "autoconfig.h"

#include "preload/stream_internal.h"

#include <sys/epoll.h>

void stream_zerocopy_sent(struct stream *s)
{
	uint32_t id = s->zc_next++;
	if (s->zc_done && id == s->zc_hi + 1) {
		s->zc_hi = id;
		return;
	}
	s->zc_lo = s->zc_hi = id;
	s->zc_done = true;
	stream_notify(s, EPOLLERR);
}

bool stream_zerocopy_take(struct stream *s, uint32_t *lo, uint32_t *hi)
{
	if (!s->zc_done)
		return false;
	*lo = s->zc_lo;
	*hi = s->zc_hi;
	s->zc_done = false;
	stream_notify(s, 0);
	return true;
}
