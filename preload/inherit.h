/*
 * What another process needs to take up a ferry socket whose number it
 * gets without this process's memory: across exec (FERRY_INHERIT, read at
 * load) and over a unix socket (SCM_RIGHTS, passfd.h). Either
 *  - a stream a process runs: the holder takes it over at first use
 *    (handover.h), or
 *  - a listener with its rendezvous socket: the holder answers on it once
 *    it accepts (lshare.h).
 * A socket that is neither (unconnected, failed, closing) cannot follow:
 * the other process sees the kernel socket behind it.
 */
#ifndef FERRY_PRELOAD_INHERIT_H
#define FERRY_PRELOAD_INHERIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ffile;

struct inherit_desc {
	char kind; /* 'S' a stream, 'L' a listener */
	int nonblock;
	/* 'S': the process that runs the stream, and the stream there */
	int pid;
	uint32_t sid, peer_sid;
	uint64_t token;
	/* 'L': the rendezvous socket's number in the describing process */
	int rdv;
	int backlog;
};

/* The environment a new program starts with: envp, plus FERRY_INHERIT
 * describing this process's ferry sockets. For exec (spawn false) this
 * process's own streams cannot follow (their state goes with the image);
 * a program this process spawns (spawn true) takes those over from it. */
struct inherit_env {
	char *const *envp; /* what to pass */
	char **owned;
	void *buf;
};
void inherit_env_make(struct inherit_env *e, char *const envp[], bool spawn);
/* After the exec failed, or the spawn returned: what it made goes. */
void inherit_env_drop(struct inherit_env *e);

/* Describes f (its reference or the table's lock held). A stream this
 * process runs itself only with own_streams (exec discards its state),
 * which takes the endpoint lock: then never under the table's lock. */
bool inherit_describe(struct ffile *f, bool own_streams, struct inherit_desc *d);
/* Takes up d for the number fd; d->rdv, if any, is this process's to keep
 * or close. False when fd is not a TCP socket of the kind d says. */
bool inherit_take(int fd, const struct inherit_desc *d);
/* fd, a TCP socket this process got without a description (over a unix
 * socket from a process that had only bound it, or a fork child's copy of
 * one), was just made to listen: it becomes a listener here, answering on a
 * rendezvous port it shares with its other holders. */
void inherit_listen_foreign(int fd, int backlog);

#endif
