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

uint64_t procinfo_start_time(pid_t pid)
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
