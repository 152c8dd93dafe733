/* ferry-doctor's parts: the report's lines (doctor.c), and the verbs
 * datapaths' checks (doctor_verbs.c, or doctor_noverbs.c in a ferry built
 * without libibverbs). */
#ifndef FERRY_COMPAT_DOCTOR_H
#define FERRY_COMPAT_DOCTOR_H

#include <stdbool.h>

struct ferry_config;

/* One line of the report under tag ("ok", "info", "warn", "FIX": counted). */
void doctor_say(const char *tag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* RDMA devices and ports; *active set when a port is usable. */
void doctor_rdma(const struct ferry_config *cfg, bool *active);
/* Whether the softib fabric opens, and what to fix if not. */
void doctor_softib(const struct ferry_config *cfg);

#endif
