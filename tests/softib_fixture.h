/* Shared by the softib tests: a private fabric per test, removed afterwards. */
#ifndef FERRY_TEST_SOFTIB_FIXTURE_H
#define FERRY_TEST_SOFTIB_FIXTURE_H

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "compat/softib/softib.h"

/* A fabric name no other test (or test run) uses. */
static inline void softib_test_fabric(char *buf, size_t cap, const char *tag)
{
	static unsigned seq;
	snprintf(buf, cap, "test-%d-%s-%u", (int)getpid(), tag, seq++);
}

/* fork() for tests: the child dies with the test process, so a test that
 * fails or times out leaves no child spinning or holding QPs. */
static inline pid_t softib_test_fork(void)
{
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid == 0 && (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent))
		_exit(1);
	return pid;
}

/* Removes the fabric's files; every QP on it must be gone. */
static inline void softib_test_fabric_remove(const char *fabric)
{
	int rc = softib_fabric_remove(fabric);
	cr_expect_eq(rc, 0, "softib_fabric_remove(%s): %d", fabric, rc);
}

#endif
