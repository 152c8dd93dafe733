/*
 * How a stream ends when its session goes away, as kernel TCP would have
 * ended it (stream.c's session handler asks; the endpoint lock is held).
 */
#ifndef FERRY_PRELOAD_STREAM_END_H
#define FERRY_PRELOAD_STREAM_END_H

#include <stdbool.h>

struct stream;

/* Whether s outlives its session: the peer is handing it to another
 * process, which continues it on a session of its own (stream_restore),
 * so the old owner's end is not the stream's. */
bool stream_end_moving(const struct stream *s);

/*
 * The error the stream fails with (0: a clean end, EOF after the bytes
 * already here) when its session ended with err (a negative errno,
 * mgmt.h): -EOWNERDEAD when the peer process is gone, whose kernel would
 * have closed its socket with a FIN, or with a RST where bytes of ours lay
 * unread there; -ETIMEDOUT when the peer stayed silent too long; anything
 * else is a reset. A peer that had shut its side and sent everything before
 * it went closed cleanly whatever the reason.
 */
int stream_end_error(const struct stream *s, int err);

#endif
