/* The fd table: numbers map to shared, reference-counted files that follow
 * dup, dup2, fcntl(F_DUPFD) and close as the kernel's open files do. */
#include "autoconfig.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include "preload_test_util.h"

TestSuite(fdtable, .init = test_table_init, .timeout = 20);

Test(fdtable, sized_from_the_hard_rlimit)
{
	struct rlimit rl;
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	size_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (1u << 22) ? (1u << 22)
									 : rl.rlim_max;
	cr_assert_geq(fdtab.size, want, "room for numbers up to the hard limit");
}

Test(fdtable, unknown_numbers_are_not_ferrys)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	cr_assert_not(fdtable_maybe(&fdtab, p[0]));
	cr_assert_null(fdtable_get(&fdtab, p[0]));
	cr_assert_not(fdtable_maybe(&fdtab, -1));
	cr_assert_not(fdtable_maybe(&fdtab, 1 << 30));
	close(p[0]);
	close(p[1]);
}

Test(fdtable, install_twice_is_refused)
{
	int fd;
	struct ffile *f = test_file(&fd);
	cr_assert_eq(fdtable_install(&fdtab, fd, f), -EEXIST);
	cr_assert_eq(fdtable_install(&fdtab, (int)fdtab.size, f), -EMFILE);
	close(fd);
	cr_assert_eq(test_released, 1);
}

Test(fdtable, close_releases_once)
{
	int fd;
	struct ffile *f = test_file(&fd);
	struct ffile *g = fdtable_get(&fdtab, fd);
	cr_assert_eq(g, f);
	cr_assert_eq(close(fd), 0);
	cr_assert_not(fdtable_maybe(&fdtab, fd));
	cr_assert_eq(test_released, 0, "a user still holds it");
	ffile_put(&fdtab, g);
	cr_assert_eq(test_released, 1);
}

Test(fdtable, dup_shares_one_file)
{
	int fd;
	struct ffile *f = test_file(&fd);
	int d = dup(fd);
	cr_assert_geq(d, 0);
	struct ffile *g = fdtable_get(&fdtab, d);
	cr_assert_eq(g, f, "the duplicate names the same file");
	ffile_put(&fdtab, g);
	close(fd);
	cr_assert_eq(test_released, 0);
	cr_assert(fdtable_maybe(&fdtab, d));
	close(d);
	cr_assert_eq(test_released, 1);
}

Test(fdtable, dup2_over_a_ferry_fd_releases_it)
{
	int a, b;
	struct ffile *fa = test_file(&a);
	test_file(&b);
	cr_assert_eq(dup2(a, b), b);
	cr_assert_eq(test_released, 1, "b's old file went with the implicit close");
	struct ffile *g = fdtable_get(&fdtab, b);
	cr_assert_eq(g, fa);
	ffile_put(&fdtab, g);
	cr_assert_eq(dup2(a, a), a, "dup2 onto itself changes nothing");
	cr_assert(fdtable_maybe(&fdtab, a));
	close(a);
	close(b);
	cr_assert_eq(test_released, 2);
}

Test(fdtable, dup3_and_fcntl_dupfd_follow)
{
	int a;
	struct ffile *fa = test_file(&a);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(dup3(a, p[0], O_CLOEXEC), p[0]);
	int d = fcntl(a, F_DUPFD_CLOEXEC, 100);
	cr_assert_geq(d, 100);
	cr_assert_eq(fcntl(d, F_GETFD), FD_CLOEXEC);
	struct ffile *g1 = fdtable_get(&fdtab, p[0]), *g2 = fdtable_get(&fdtab, d);
	cr_assert_eq(g1, fa);
	cr_assert_eq(g2, fa);
	ffile_put(&fdtab, g1);
	ffile_put(&fdtab, g2);
	close(a);
	close(p[0]);
	cr_assert_eq(test_released, 0);
	close(d);
	cr_assert_eq(test_released, 1);
	close(p[1]);
}

Test(fdtable, dup_onto_a_ferry_number_from_a_plain_fd_unmaps_it)
{
	int a;
	test_file(&a);
	int p[2];
	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(dup2(p[0], a), a);
	cr_assert_not(fdtable_maybe(&fdtab, a), "a is a pipe now");
	cr_assert_eq(test_released, 1);
	close(a);
	close(p[0]);
	close(p[1]);
}

Test(fdtable, nonblock_is_shared_by_duplicates)
{
	int a;
	struct ffile *f = test_file(&a);
	int d = dup(a);
	int fl = fcntl(a, F_GETFL);
	cr_assert_geq(fl, 0);
	cr_assert_eq(fcntl(a, F_SETFL, fl & ~O_NONBLOCK), 0);
	cr_assert_not(ffile_nonblock(f));
	cr_assert_eq(fcntl(d, F_GETFL) & O_NONBLOCK, 0);
	cr_assert_eq(fcntl(d, F_SETFL, fl | O_NONBLOCK), 0);
	cr_assert(ffile_nonblock(f));
	cr_assert_neq(fcntl(a, F_GETFL) & O_NONBLOCK, 0, "a status flag, shared as in the kernel");
	close(a);
	close(d);
}

Test(fdtable, forget_unmaps_every_number)
{
	int a;
	struct ffile *f = test_file(&a);
	int d = dup(a);
	ffile_get(f);
	cr_assert_eq(fdtable_forget_file(&fdtab, f), 2);
	cr_assert_not(fdtable_maybe(&fdtab, a));
	cr_assert_not(fdtable_maybe(&fdtab, d));
	cr_assert_eq(test_released, 0);
	ffile_put(&fdtab, f);
	cr_assert_eq(test_released, 1);
	close(a);
	close(d);
}

Test(fdtable, freed_files_are_recycled_not_freed)
{
	int a;
	struct ffile *f = test_file(&a);
	close(a);
	struct ffile *g = ffile_new(&fdtab, FFILE_TEST);
	cr_assert_eq(g, f, "type-stable: a racing reader never sees freed memory");
	ffile_put(&fdtab, g);
}

static int race_fd;
static volatile int race_stop;

static void *race_reader(void *arg)
{
	(void)arg;
	while (!race_stop) {
		struct ffile *f = fdtable_get(&fdtab, race_fd);
		if (f) {
			cr_assert(f->refs > 0);
			ffile_put(&fdtab, f);
		}
	}
	return NULL;
}

Test(fdtable, get_races_close_safely)
{
	pthread_t th;
	int fd;
	test_file(&fd);
	race_fd = fd;
	cr_assert_eq(pthread_create(&th, NULL, race_reader, NULL), 0);
	for (int i = 0; i < 2000; i++) {
		close(fd);
		test_file(&fd);
		cr_assert_eq(fd, race_fd, "the lowest number comes back");
	}
	race_stop = 1;
	pthread_join(th, NULL);
	close(fd);
	cr_assert_eq(test_released, 2001, "every file released exactly once");
}
