/* Process facts from /proc (procinfo.h). */
#include "autoconfig.h"

#include "transport/procinfo.h"

#include <fcntl.h>
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

uint64_t procinfo_ns_inode(const char *ns)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/self/ns/%s", ns);
	return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}
