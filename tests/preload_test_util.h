/* Helpers for preload unit tests: ferry files over real kernel fds whose
 * readiness the test sets by hand. */
#ifndef FERRY_TEST_PRELOAD_UTIL_H
#define FERRY_TEST_PRELOAD_UTIL_H

#include <criterion/criterion.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "preload/fdtable.h"

static int test_released;

static void test_release(struct ffile *f)
{
	(void)f;
	__atomic_add_fetch(&test_released, 1, __ATOMIC_RELAXED);
}

static inline void test_table_init(void)
{
	if (!fdtab.slots)
		cr_assert_eq(fdtable_init(&fdtab, 0), 0);
	test_released = 0;
}

/* A ferry test file on a fresh kernel fd (an eventfd placeholder); the
 * table holds the only reference. */
static inline struct ffile *test_file(int *fd)
{
	*fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	cr_assert_geq(*fd, 0);
	struct ffile *f = ffile_new(&fdtab, FFILE_TEST);
	cr_assert_not_null(f);
	f->release = test_release;
	cr_assert_eq(fdtable_install(&fdtab, *fd, f), 0);
	ffile_put(&fdtab, f);
	return f;
}

#endif
