/* ferry's diagnostics: one line per message to stderr or FERRY_LOG_FILE. */
#ifndef FERRY_LOG_H
#define FERRY_LOG_H

#include <stdbool.h>
#include "transport/config.h"

/* Sets the threshold and destination. Safe to call again (after fork, in tests). */
void ferry_log_init(enum ferry_log_level level, const char *path);

bool ferry_log_enabled(enum ferry_log_level level);

/* Formats without allocating and writes with one write(2); keeps errno. */
void ferry_log(enum ferry_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Logs only the first time this call site runs in the process. */
#define ferry_log_once(level, ...)                                                \
	do {                                                                      \
		static int ferry_logged_;                                         \
		if (!__atomic_exchange_n(&ferry_logged_, 1, __ATOMIC_RELAXED))    \
			ferry_log(level, __VA_ARGS__);                            \
	} while (0)

#define log_error(...) ferry_log(FERRY_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) ferry_log(FERRY_LOG_WARN, __VA_ARGS__)
#define log_info(...) ferry_log(FERRY_LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                              \
	do {                                                        \
		if (ferry_log_enabled(FERRY_LOG_DEBUG))             \
			ferry_log(FERRY_LOG_DEBUG, __VA_ARGS__);    \
	} while (0)

#endif
