/*
 * TCP urgent data on a stream, as Linux keeps it (tcp_check_urg, tcp_urg,
 * tcp_recv_urg, tcp_poll): one mark, the peer's latest; its byte is read
 * with MSG_OOB, or in line under SO_OOBINLINE; a read stops short of the
 * mark when it has bytes before it; POLLPRI while the byte waits.
 */
#include "autoconfig.h"

#include "preload/stream_internal.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>

void stream_urgent_arrived(struct stream *s, uint64_t seq)
{
	if (s->urg != STREAM_URG_NONE && seq <= s->urg_seq)
		return; /* a mark had already (a write that waited marked as it went) */
	int b = rxbuf_byte_at(&s->rx, seq);
	if (b < 0)
		return;
	/* A reader stopped at the old mark would otherwise find that byte in
	 * line in front of the new one: the kernel drops it (tcp_check_urg).
	 * Anywhere else the old byte stays in line. */
	if (s->urg != STREAM_URG_NONE && !s->urg_inline && s->rx.head == s->urg_seq &&
	    s->rx.tail > s->rx.head)
		rxbuf_skip(&s->rx, 1);
	s->urg = STREAM_URG_VALID;
	s->urg_seq = seq;
	s->urg_byte = (uint8_t)b;
	stream_notify(s, EPOLLIN | EPOLLPRI);
}

void stream_urgent_bounds(const struct stream *s, size_t *skip, size_t *max)
{
	*skip = 0;
	*max = SIZE_MAX;
	if (s->urg == STREAM_URG_NONE || s->urg_seq < s->rx.head)
		return;
	if (s->urg_seq > s->rx.head)
		*max = (size_t)(s->urg_seq - s->rx.head); /* up to the mark, not past */
	else if (!s->urg_inline)
		*skip = 1; /* at the mark: its byte is not in line */
}

void stream_urgent_passed(struct stream *s)
{
	if (s->urg != STREAM_URG_NONE && s->rx.head > s->urg_seq)
		s->urg = STREAM_URG_NONE;
}

bool stream_urgent_hides_byte(const struct stream *s)
{
	return s->urg != STREAM_URG_NONE && !s->urg_inline && s->rx.head == s->urg_seq &&
	       s->rx.tail > s->rx.head;
}

ssize_t stream_recv_oob(struct stream *s, const struct iovec *iov, int iovcnt, int flags)
{
	/* "No URG data to read": also what a second read of the byte gets. */
	if (s->urg_inline || s->urg != STREAM_URG_VALID)
		return -EINVAL;
	size_t len = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (len == 0 && iov[i].iov_len && !(flags & MSG_TRUNC))
			*(uint8_t *)iov[i].iov_base = s->urg_byte;
		len += iov[i].iov_len;
	}
	if (!(flags & MSG_PEEK)) {
		s->urg = STREAM_URG_READ;
		stream_notify(s, 0);
	}
	return len ? 1 : 0;
}

size_t stream_inq(const struct stream *s)
{
	/* tcp_inq: out of line, only the bytes before a mark not read past */
	if (s->urg != STREAM_URG_NONE && !s->urg_inline && s->urg_seq >= s->rx.head &&
	    s->urg_seq < s->rx.tail)
		return (size_t)(s->urg_seq - s->rx.head);
	return rxbuf_avail(&s->rx);
}

bool stream_at_mark(const struct stream *s)
{
	return s->urg != STREAM_URG_NONE && s->urg_seq == s->rx.head;
}
