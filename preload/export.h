/* Marks the interposed libc names: everything else in libferry is hidden. */
#ifndef FERRY_PRELOAD_EXPORT_H
#define FERRY_PRELOAD_EXPORT_H

#define FERRY_EXPORT __attribute__((visibility("default")))

/* Returns -1 with errno = -rc for rc < 0, else rc: the libc edge. */
static inline long ferry_ret(long rc)
{
	if (rc < 0) {
		extern int *__errno_location(void);
		*__errno_location() = (int)-rc;
		return -1;
	}
	return rc;
}

#endif
