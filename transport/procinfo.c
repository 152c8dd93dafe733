/* Process facts from /proc (procinfo.h). */
#include "autoconfig.h"

#include "transport/procinfo.h"

#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/sys.h"

static uint64_t procinfo_read_start_time(pid_t pid);

/* This process's own, read once per process: a fork child finds its
 * parent's pid here and reads its own (the start time is stored before the
 * pid that vouches for it). */
static pid_t procinfo_self_pid;
static uint64_t procinfo_self_start;

uint64_t procinfo_start_time(pid_t pid)
{
	if (pid != 0)
		return procinfo_read_start_time(pid);
	pid_t self = getpid();
	if (__atomic_load_n(&procinfo_self_pid, __ATOMIC_ACQUIRE) == self)
		return __atomic_load_n(&procinfo_self_start, __ATOMIC_RELAXED);
	uint64_t st = procinfo_read_start_time(0);
	if (st) {
		__atomic_store_n(&procinfo_self_start, st, __ATOMIC_RELAXED);
		__atomic_store_n(&procinfo_self_pid, self, __ATOMIC_RELEASE);
	}
	return st;
}

static uint64_t procinfo_read_start_time(pid_t pid)
{
	char path[64], buf[1024];
	if (pid == 0)
		snprintf(path, sizeof(path), "/proc/self/stat");
	else
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = sys()->read(fd, buf, sizeof(buf) - 1);
	sys()->close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* Field 22; the command name (field 2) may hold spaces and
	 * parentheses, so count from the last ')'. */
	char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	for (int field = 2; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

/*
 * Namespace inodes, read once per process: a stat of /proc/self/ns costs a
 * walk through procfs (about 20 us here), and a fork-per-connection child
 * asked three or four times (its stats file, its management identity,
 * softib). A fork child is where its parent is, so it keeps the parent's
 * answers (procinfo_forked), unless the process ever changed namespaces
 * (procinfo_ns_changed), after which every ask reads: after
 * unshare(CLONE_NEWPID) its children's pid namespace is not its own. Each
 * entry is keyed by the pid that read it, so a child made any other way
 * (clone) reads again.
 */
struct ns_memo {
	const char *name;
	uint64_t ino;
	pid_t pid; /* whose ino it is; 0: none (atomic) */
};
static struct ns_memo ns_memos[] = {{.name = "pid"}, {.name = "net"}};
#define NS_MEMOS (sizeof(ns_memos) / sizeof(ns_memos[0]))
static bool ns_moved;	      /* atomic: the process changed namespaces */
static uint64_t ns_reads;     /* atomic: /proc/self/ns stats made */

static uint64_t ns_read(const char *ns)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/self/ns/%s", ns);
	__atomic_add_fetch(&ns_reads, 1, __ATOMIC_RELAXED);
	return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

uint64_t procinfo_ns_inode(const char *ns)
{
	struct ns_memo *m = NULL;
	for (size_t i = 0; i < NS_MEMOS; i++)
		if (strcmp(ns_memos[i].name, ns) == 0)
			m = &ns_memos[i];
	if (!m)
		return ns_read(ns);
	pid_t self = getpid();
	if (__atomic_load_n(&m->pid, __ATOMIC_ACQUIRE) == self)
		return __atomic_load_n(&m->ino, __ATOMIC_RELAXED);
	uint64_t ino = ns_read(ns);
	if (ino && !__atomic_load_n(&ns_moved, __ATOMIC_SEQ_CST)) {
		__atomic_store_n(&m->ino, ino, __ATOMIC_RELAXED);
		__atomic_store_n(&m->pid, self, __ATOMIC_SEQ_CST);
		/* A change between the look above and the store: its clearing
		 * may have come first, so this one clears too. */
		if (__atomic_load_n(&ns_moved, __ATOMIC_SEQ_CST))
			__atomic_store_n(&m->pid, 0, __ATOMIC_SEQ_CST);
	}
	return ino;
}

void procinfo_forked(pid_t parent)
{
	if (__atomic_load_n(&ns_moved, __ATOMIC_ACQUIRE))
		return;
	pid_t self = getpid();
	for (size_t i = 0; i < NS_MEMOS; i++)
		if (__atomic_load_n(&ns_memos[i].pid, __ATOMIC_ACQUIRE) == parent)
			__atomic_store_n(&ns_memos[i].pid, self, __ATOMIC_RELEASE);
}

void procinfo_ns_changed(void)
{
	__atomic_store_n(&ns_moved, true, __ATOMIC_SEQ_CST);
	for (size_t i = 0; i < NS_MEMOS; i++)
		__atomic_store_n(&ns_memos[i].pid, 0, __ATOMIC_SEQ_CST);
}

void procinfo_unsharing(long flags)
{
	if (flags & (CLONE_NEWNET | CLONE_NEWPID))
		procinfo_ns_changed();
}

uint64_t procinfo_ns_reads(void)
{
	return __atomic_load_n(&ns_reads, __ATOMIC_RELAXED);
}
