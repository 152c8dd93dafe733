/*
 * ferry-stat's side of preload/statmap_layout.h: finds the ferry processes
 * the caller may see, asks each for its tables, and copies what they wrote.
 */
#ifndef FERRY_COMPAT_STAT_READ_H
#define FERRY_COMPAT_STAT_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "preload/statmap_layout.h"

enum stat_tables {
	STAT_TABLES_NONE,    /* never written: counters only */
	STAT_TABLES_OLD,     /* the process did not answer: its last ones */
	STAT_TABLES_CURRENT, /* written for this request */
};

/* Processes holding a listening socket (its inode), found in /proc. */
#define STAT_HOLDERS_MAX 16
struct stat_holders {
	uint64_t inode;
	unsigned n;
	pid_t pid[STAT_HOLDERS_MAX];
};

struct stat_proc {
	struct statmap_hdr *h; /* a private copy: header, counters, tables */
	enum stat_tables tables;
};

struct stat_view {
	struct stat_proc *procs;
	size_t n;
	struct stat_holders *holders; /* one per distinct listener inode */
	size_t nholders;
};

/* Reads every visible ferry process (only is 0), or only pid only,
 * waiting at most wait_ms for their tables. Files of processes that are
 * gone are removed on the way. 0, or -errno (-ENOMEM). */
int stat_read(pid_t only, unsigned wait_ms, struct stat_view *v);
void stat_view_free(struct stat_view *v);
/* The holders of a listener's inode (NULL when unknown). */
const struct stat_holders *stat_holders_of(const struct stat_view *v, uint64_t inode);

#endif
