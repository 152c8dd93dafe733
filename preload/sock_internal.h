/*
 * What the socket files share and nothing else includes: socket.c (a
 * socket's life), sock_connect.c, sock_listen.c, sockopt.c and fcntl.c.
 */
#ifndef FERRY_PRELOAD_SOCK_INTERNAL_H
#define FERRY_PRELOAD_SOCK_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "preload/sock.h"

struct ffile;

/* Guards ph_fd of installed sockets: sock_local's swap, sock_let_go, and
 * duplications (fcntl.c). Taken before the fd table's lock. */
extern pthread_mutex_t sock_ph_lock;

/* Makes fd's file ferry's socket; ph_fd is the pooled socket fd duplicates,
 * or -1. Returns 0 or -errno (fd stays plain, ph_fd untouched). */
int sock_adopt(int fd, int domain, int type, int ph_fd);
/* A number for a new ferry socket, its pooled socket's hidden descriptor
 * in *h (-1: a socket of its own); -1 with errno. */
int sock_new_number(int domain, int type, int protocol, int *h);
/* The number becomes its socket's own: the pooled placeholder behind it
 * (*h) goes, and the kernel gets the flags type asked for. */
void sock_number_own(int fd, int *h, int type);
/* Whether f's numbers are duplicates of a pooled socket the kernel keeps
 * no state of yet (file flags wait in f->status). */
bool sock_pooled_clean(const struct fsock *sk);
void sock_drop_rendezvous(struct fsock *sk);
/* The socket becomes the kernel's for good (see socket.c). */
void sock_handoff(struct ffile *f);

#endif
