/*
 * posix_spawn, posix_spawnp, system and popen start a program without
 * fork() (glibc's system and popen clone and exec directly), and the
 * program inherits every socket not marked close-on-exec. Their kernel
 * sockets are then another process's too, so none of them may later stand
 * behind a new socket of this one (see phpool.h).
 *
 * A program posix_spawn starts takes this process's connections over at
 * its first use, as a fork child does (inherit.h, handover.h): a server
 * that spawns a handler with the connection as its stdin and stdout (Rust's
 * Command, Python's subprocess where it spawns) works as with fork and
 * exec. system and popen run a shell, which finds the list of another
 * process and leaves it: a connection given to one reads as not connected.
 */
#include "autoconfig.h"

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>

#include "preload/export.h"
#include "preload/ferry.h"
#include "preload/handover.h"
#include "preload/inherit.h"
#include "preload/reentry.h"
#include "preload/sock.h"
#include "preload/stream.h"
#include "transport/sys.h"

typedef int (*spawn_fn)(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			const posix_spawnattr_t *attr, char *const argv[], char *const envp[]);

static int spawn_carrying(spawn_fn real, pid_t *pid, const char *file,
			  const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
			  char *const argv[], char *const envp[])
{
	if (ferry_internal())
		return real(pid, file, fa, attr, argv, envp);
	sock_share_all();
	bool on = ferry_state() == FERRY_ON;
	if (on) {
		handover_fork_prepare();
		/* The program holds what this process has now: a fork's mark,
		 * so the streams it may take are kept for it (handover.h). */
		ferry_lock();
		stream_forks++;
		ferry_unlock();
	}
	struct inherit_env e;
	inherit_env_make(&e, envp, true);
	pid_t child = 0;
	int rc = real(&child, file, fa, attr, argv, e.envp);
	inherit_env_drop(&e);
	if (rc == 0) {
		if (pid)
			*pid = child;
		if (on)
			handover_fork_parent(child);
	}
	return rc;
}

FERRY_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			     const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	return spawn_carrying(sys()->posix_spawn, pid, path, fa, attr, argv, envp);
}

FERRY_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			      const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	return spawn_carrying(sys()->posix_spawnp, pid, file, fa, attr, argv, envp);
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
