/*
 * posix_spawn, posix_spawnp, system and popen start a program without
 * fork() (glibc's system and popen clone and exec directly), and the
 * program inherits every socket not marked close-on-exec. Their kernel
 * sockets are then another process's too, so none of them may later stand
 * behind a new socket of this one (see phpool.h).
 */
#include "autoconfig.h"

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>

#include "preload/export.h"
#include "preload/ferry.h"
#include "preload/reentry.h"
#include "preload/sock.h"
#include "transport/sys.h"

FERRY_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			     const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	if (!ferry_internal())
		sock_share_all();
	return sys()->posix_spawn(pid, path, fa, attr, argv, envp);
}

FERRY_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			      const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	if (!ferry_internal())
		sock_share_all();
	return sys()->posix_spawnp(pid, file, fa, attr, argv, envp);
}

FERRY_EXPORT int system(const char *command)
{
	if (command && !ferry_internal())
		sock_share_all();
	return sys()->system(command);
}

FERRY_EXPORT FILE *popen(const char *command, const char *type)
{
	if (!ferry_internal())
		sock_share_all();
	return sys()->popen(command, type);
}
