/* Host-wide "last ran" marks (mark.h). */
#include "autoconfig.h"

#include "transport/mark.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include "transport/sys.h"

bool mark_fresh(const char *path, unsigned uid, uint64_t window_ns)
{
	struct stat st;
	struct timespec now;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid ||
	    clock_gettime(CLOCK_REALTIME, &now) != 0)
		return false;
	int64_t age = ((int64_t)now.tv_sec - (int64_t)st.st_mtim.tv_sec) * 1000000000ll +
		      ((int64_t)now.tv_nsec - (int64_t)st.st_mtim.tv_nsec);
	return age >= 0 && (uint64_t)age < window_ns;
}

void mark_touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0) {
		futimens(fd, NULL);
		sys()->close(fd);
	}
}
