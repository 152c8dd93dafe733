/* ferry's diagnostics. */
#include "autoconfig.h"

#include "transport/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "transport/sys.h"

static int log_level = FERRY_LOG_WARN;
static int log_fd = 2;

void ferry_log_init(enum ferry_log_level level, const char *path)
{
	__atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
	if (path && *path) {
		int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			int old = __atomic_exchange_n(&log_fd, fd, __ATOMIC_RELAXED);
			if (old > 2)
				sys()->close(old);
			return;
		}
		ferry_log(FERRY_LOG_WARN, "FERRY_LOG_FILE=%s cannot be opened (%s); logging to stderr",
			  path, strerror(errno));
	}
}

bool ferry_log_enabled(enum ferry_log_level level)
{
	return (int)level <= __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

void ferry_log(enum ferry_log_level level, const char *fmt, ...)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	if (!ferry_log_enabled(level))
		return;
	int saved = errno;
	char line[1024];
	int n = snprintf(line, sizeof(line), "ferry[%d] %s: ", (int)getpid(), names[level]);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t w = sys()->write(__atomic_load_n(&log_fd, __ATOMIC_RELAXED), line, len);
	(void)w;
	errno = saved;
}
