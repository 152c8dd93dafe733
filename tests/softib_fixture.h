/* Shared by the softib tests: a private fabric per test, removed afterwards. */
#ifndef FERRY_TEST_SOFTIB_FIXTURE_H
#define FERRY_TEST_SOFTIB_FIXTURE_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compat/softib/softib.h"

/* A fabric name no other test (or test run) uses. */
static inline void softib_test_fabric(char *buf, size_t cap, const char *tag)
{
	static unsigned seq;
	snprintf(buf, cap, "test-%d-%s-%u", (int)getpid(), tag, seq++);
}

/* Removes the fabric's files (its QPs must be gone already). */
static inline void softib_test_fabric_remove(const char *fabric)
{
	char dir[64], path[512];
	if (softib_fabric_dir(dir, sizeof(dir)))
		return;
	DIR *d = opendir(dir);
	if (!d)
		return;
	size_t n = strlen(fabric);
	struct dirent *de;
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, fabric, n) && de->d_name[n] == '.') {
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			unlink(path);
		}
	closedir(d);
}

#endif
