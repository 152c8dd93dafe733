/*
 * A file whose modification time says when some host-wide chore last ran,
 * so that one process in a while does it for all: statmap's sweep of dead
 * processes' files, softib's reclaim of dead processes' queues. A fork
 * child's own memory cannot tell it; every process can read the mark.
 */
#ifndef FERRY_TRANSPORT_MARK_H
#define FERRY_TRANSPORT_MARK_H

#include <stdbool.h>
#include <stdint.h>

/* Whether path is a regular file of uid touched less than window_ns ago. */
bool mark_fresh(const char *path, unsigned uid, uint64_t window_ns);
/* Touches path, making it if need be (never through a symlink). */
void mark_touch(const char *path);

#endif
