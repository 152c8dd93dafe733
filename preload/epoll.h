/*
 * epoll over ferry files. An epoll instance stays the kernel's until a ferry
 * fd is added to it; it then gets a user-space interest and ready list for
 * ferry files, while plain fds stay registered in the kernel instance. The
 * kernel instance also holds a wake-up eventfd and, while a thread sleeps
 * there, the nic's notification fd, so it remains the thing a thread sleeps
 * on, and other epolls or poll can watch it (an epoll fd inside another
 * epoll works as in the kernel). The kernel side of a hybrid file's one-shot
 * items sits in a kernel instance of its own, nested under a tag, so a
 * report is known for whose it is whatever data the application gave.
 *
 * Lock order: rpc lock, then a file's wlock, then an instance's lock.
 */
#ifndef FERRY_PRELOAD_EPOLL_H
#define FERRY_PRELOAD_EPOLL_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <time.h>

struct ffile;

/* With f->wlock held: events just happened on f, whose mask is now mask. */
void epoll_file_event(struct ffile *f, uint32_t mask, uint32_t events);
/* With f->wlock held: f became less ready; instances watched from outside
 * drop items that are no longer ready, so the outside sees them quiet. */
void epoll_file_quiet(struct ffile *f);
/* f's last reference is gone: drop its registrations everywhere. */
void epoll_file_gone(struct ffile *f);
/*
 * f stops being ferry's (a connect that fell back to the kernel): its
 * registrations move to the kernel instances, keeping events and data.
 * Call before the file leaves the fd table, while its numbers are valid.
 */
void epoll_file_kernelize(struct ffile *f);

/* f just became hybrid (a listener): its existing registrations are made
 * in the kernel instances too, so plain clients' connections show. */
void epoll_file_hybrid(struct ffile *f);

/* An epoll fd is being watched from outside (inside another epoll, or
 * polled): its wake-up fd is kept readable whenever ferry items are ready. */
void epoll_mark_watched(struct ffile *f);
/* Whether any epoll instance of this process was ever watched from outside:
 * until one is, a file that becomes less ready has nothing to tell. */
bool epoll_watched_any(void);

/* The implementations behind the interposed calls; -errno on failure.
 * timeout NULL waits forever. */
int fepoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int fepoll_wait(int epfd, struct epoll_event *events, int max, const struct timespec *timeout,
		const sigset_t *sigmask);

/* The items this thread has examined in epoll's lists so far: what an
 * event or a call costs, which must not grow with an instance's size. */
unsigned long epoll_items_examined(void);

/* In a fork child: the threads that slept on the instance are gone, and so
 * is their claim on the nic's fd (the kernel instance, shared with the
 * parent, is left as it is). */
void epoll_fork_child(struct ffile *f);

#endif
