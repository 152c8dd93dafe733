/*
 * fork, vfork and daemon. The child of a ferry process inherits the
 * placeholders but none of the transport (its threads are gone and the
 * registered memory is MADV_DONTFORK), so it starts a ferry of its own at
 * its first eligible socket call, as exec does. An inherited listener is
 * shared (lshare.h): the child answers on it once it accepts there. An
 * inherited stream is the parent's until the child uses it, when the
 * parent hands it over (handover.h). Any other inherited ferry socket
 * becomes dead, so using one is an error rather than a hang, and closing
 * one never touches the parent's sessions; one the child makes listen
 * becomes a listener of its own (inherit_listen_foreign).
 */
#include "autoconfig.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "mgmt/mgmt.h"
#include "preload/epoll.h"
#include "preload/export.h"
#include "preload/fdtable.h"
#include "preload/ferry.h"
#include "preload/handover.h"
#include "preload/lshare.h"
#include "preload/passfd.h"
#include "preload/peercache.h"
#include "preload/phpool.h"
#include "preload/progress.h"
#include "preload/reentry.h"
#include "preload/sock.h"
#include "preload/statmap.h"
#include "preload/stream.h"
#include "preload/wait.h"
#include "transport/nic.h"
#include "transport/procinfo.h"
#include "transport/rpc.h"
#include "transport/sys.h"
#include "transport/txdefer.h"

/* The parent's pid, as the child's pass needs it. */
static pid_t fork_parent;

static void fork_kill_file(struct ffile *f, void *arg)
{
	(void)arg;
	if (f->kind == FFILE_EPOLL)
		epoll_fork_child(f);
	if (f->kind != FFILE_SOCK)
		return;
	struct fsock *lsk = f->priv;
	if (lsk && lsk->state == FSOCK_LISTEN) {
		lshare_fork_child(f);
		return;
	}
	/* The child's copy of the hidden descriptor would keep the parent's
	 * placeholder alive after the parent closes it; the child's own
	 * number still holds it for as long as the child wants. */
	struct fsock *sk = f->priv;
	if (sk && sk->ph_fd >= 0) {
		sys()->close(sk->ph_fd);
		sk->ph_fd = -1;
	}
	f->hybrid = false;
	handover_fork_child(f, fork_parent); /* a stream the parent hands over on use */
	if (f->kind == FFILE_DEAD)
		__atomic_store_n(&f->mask, EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP,
				 __ATOMIC_RELEASE);
}

/* The child's ferry starts anew at its first eligible socket call: the
 * parent's endpoint, sessions and streams are forgotten here without a word
 * to anyone (they are still the parent's). */
static void fork_start_afresh(void)
{
	/* Their sockets too: a copy here would keep a loopback port bound
	 * that the parent gives up when it widens (udp_bind.h). */
	mgmt_forked_child(ferry.mgmt);
	nic_forked_child(rpc_nic(ferry.rpc));
	stream_forget_all();
	peercache_reset();
	phpool_drain();
	__atomic_store_n(&ferry.stats, NULL, __ATOMIC_RELEASE);
	ferry.nx = NULL;
	ferry.rpc = NULL;
	ferry.mgmt = NULL;
	__atomic_store_n(&ferry.state, FERRY_UNINIT, __ATOMIC_RELEASE);
}

/* ferry's threads stop where they hold nothing, in an order where none
 * waits for one stopped before it: the handover thread may wait for the
 * peer's answer the others bring in. */
static void fork_hold_threads(void)
{
	handover_hold();
	mgmt_hold(ferry.mgmt);
	progress_hold();
}

static void fork_release_threads(void)
{
	progress_release();
	mgmt_release(ferry.mgmt);
	handover_release();
}

FERRY_EXPORT pid_t fork(void)
{
	const struct sys_fns *c = sys();
	if (ferry_internal() || ferry_state() != FERRY_ON)
		return c->fork();
	handover_fork_prepare();
	fork_hold_threads();
	/* Hold mgmt's tables, the endpoint and the fd table still across the
	 * fork, so the child's copies are consistent. */
	mgmt_freeze(ferry.mgmt);
	ferry_lock();
	pthread_mutex_lock(&fdtab.lock);
	phpool_fork_prepare();
	fork_parent = getpid();
	stream_forks++;
	pid_t pid = c->fork();
	pthread_mutex_unlock(&fdtab.lock);
	if (pid != 0) {
		phpool_fork_parent();
		if (pid > 0)
			sock_share_all(); /* the child holds copies of their numbers */
		ferry_unlock();
		mgmt_thaw(ferry.mgmt);
		fork_release_threads();
		if (pid > 0) {
			lshare_fork_parent();
			handover_fork_parent(pid);
		}
		return pid;
	}
	/* The child: the endpoint lock stays taken forever (nothing may use
	 * the endpoint here), and this thread is the only one. */
	txdefer_fork_child(); /* first: nothing the parent staged is ours */
	handover_fork_child_begin();
	statmap_fork_child();
	procinfo_forked(fork_parent); /* no namespace read again */
	passfd_fork_child();
	lshare_fork_child_begin();
	fdtable_each(&fdtab, fork_kill_file, NULL);
	/* Placeholders of closing streams: the parent's own again, once they
	 * are done (it closes them rather than pool them, phpool.h). */
	stream_fork_child();
	phpool_fork_child();
	wait_fork_child();
	ferry_forked_child();
	ferry_internal_depth = 0;
	fork_start_afresh();
	return 0;
}

/* vfork's child shares the parent's memory, so the fd table would be the
 * parent's too: a plain fork is the safe reading (POSIX allows it). */
FERRY_EXPORT pid_t vfork(void)
{
	return fork();
}

FERRY_EXPORT int daemon(int nochdir, int noclose)
{
	if (ferry_internal() || ferry_state() != FERRY_ON)
		return sys()->daemon(nochdir, noclose);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0)
		ferry_exit_plain(0); /* the child carries on with everything */
	if (setsid() < 0)
		return -1;
	if (!nochdir && chdir("/") != 0)
		return -1;
	if (!noclose) {
		int fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			dup2(fd, 2);
			if (fd > 2)
				close(fd);
		}
	}
	return 0;
}
