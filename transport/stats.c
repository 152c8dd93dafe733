/* Per-process counters as JSON. */
#include "autoconfig.h"

#include "transport/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "transport/sys.h"

int stats_format_json(const struct ferry_stats *st, const char *transport, char *buf, size_t cap)
{
	size_t n = 0;
	int w;
#define EMIT(...)                                                       \
	do {                                                            \
		w = snprintf(buf + n, cap > n ? cap - n : 0, __VA_ARGS__); \
		if (w < 0 || (size_t)w >= (cap > n ? cap - n : 0))      \
			return -ENOSPC;                                 \
		n += (size_t)w;                                         \
	} while (0)
	EMIT("{\"pid\":%d,\"transport\":\"%s\"", (int)getpid(), transport ? transport : "none");
#define FERRY_STATS_EMIT(name) \
	EMIT(",\"%s\":%llu", #name, (unsigned long long)__atomic_load_n(&st->name, __ATOMIC_RELAXED));
	FERRY_STATS_COUNTERS(FERRY_STATS_EMIT)
#undef FERRY_STATS_EMIT
	EMIT("}\n");
#undef EMIT
	return (int)n;
}

static int expand_path(const char *path, char *out, size_t cap)
{
	size_t n = 0;
	for (const char *p = path; *p; p++) {
		if (p[0] == '%' && p[1] == 'p') {
			int w = snprintf(out + n, cap - n, "%d", (int)getpid());
			if (w < 0 || (size_t)w >= cap - n)
				return -ENAMETOOLONG;
			n += (size_t)w;
			p++;
		} else {
			if (n + 1 >= cap)
				return -ENAMETOOLONG;
			out[n++] = *p;
		}
	}
	out[n] = '\0';
	return 0;
}

int stats_write_file(const struct ferry_stats *st, const char *transport, const char *path)
{
	char final[600], tmp[640], json[4096];
	int rc = expand_path(path, final, sizeof(final));
	if (rc)
		return rc;
	int len = stats_format_json(st, transport, json, sizeof(json));
	if (len < 0)
		return len;
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", final, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	ssize_t w = sys()->write(fd, json, (size_t)len);
	int err = w == len ? 0 : (w < 0 ? -errno : -EIO);
	sys()->close(fd);
	if (!err && rename(tmp, final) != 0)
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}
