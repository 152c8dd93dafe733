/*
 * The application's signal handlers, each installed behind a trampoline
 * that notes its run on the thread it interrupts (wait_signal_noted) before
 * calling it. A blocking call on a ferry socket first spins, and a signal
 * handled then did not end any kernel sleep: without the note the call went
 * on waiting where the kernel's would have failed with EINTR (a SIGINT to a
 * server blocked in accept, an alarm meant to end a read).
 *
 * What the application asks of sigaction sees its own handler and flags,
 * never the trampoline. Dispositions never set through here (inherited,
 * SIG_DFL, SIG_IGN, or set with a raw system call) pass through untouched;
 * a handler set with a raw rt_sigaction is not noted, and a signal it
 * handles while a call spins is then missed as before.
 */
#include "autoconfig.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>

#include "preload/export.h"
#include "preload/signal.h"
#include "preload/wait.h"
#include "transport/sys.h"

#ifndef NSIG
#define NSIG 65
#endif

/* One installation: never changed once published, so a trampoline that
 * read the pointer calls a consistent handler and flags. */
struct sig_app {
	void (*handler)(int);
	void (*action)(int, siginfo_t *, void *);
	int flags;
};

/* Records go round per signal; a delivery reads its record at once, long
 * before the same signal's handler has been replaced SIG_APP_SLOTS times. */
#define SIG_APP_SLOTS 8
static struct sig_app sig_slots[NSIG][SIG_APP_SLOTS];
static unsigned sig_next[NSIG]; /* atomic */
static const struct sig_app *sig_current[NSIG]; /* atomic; NULL: not ours */
/* siginterrupt(sig, 1) was asked: signal() then installs without SA_RESTART,
 * as glibc's does. */
static int sig_interrupts[NSIG]; /* atomic */

static void sig_trampoline(int sig, siginfo_t *si, void *uc)
{
	const struct sig_app *a =
		sig > 0 && sig < NSIG ? __atomic_load_n(&sig_current[sig], __ATOMIC_ACQUIRE) : NULL;
	if (!a)
		return;
	/* The kernel reset the disposition on delivery: so does our view. */
	if (a->flags & SA_RESETHAND)
		__atomic_store_n(&sig_current[sig], NULL, __ATOMIC_RELEASE);
	wait_signal_noted((a->flags & SA_RESTART) != 0);
	if (a->flags & SA_SIGINFO)
		a->action(sig, si, uc);
	else
		a->handler(sig);
}

static const struct sig_app *sig_publish(int sig, const struct sigaction *act)
{
	unsigned i = __atomic_fetch_add(&sig_next[sig], 1, __ATOMIC_RELAXED) % SIG_APP_SLOTS;
	struct sig_app *a = &sig_slots[sig][i];
	a->flags = act->sa_flags;
	if (act->sa_flags & SA_SIGINFO) {
		a->action = act->sa_sigaction;
		a->handler = NULL;
	} else {
		a->handler = act->sa_handler;
		a->action = NULL;
	}
	return a;
}

/* What the kernel reported, as the application set it. */
static void sig_as_set(struct sigaction *old, const struct sig_app *a)
{
	if (!a || (old->sa_flags & SA_SIGINFO) == 0 || old->sa_sigaction != sig_trampoline)
		return;
	old->sa_flags = (old->sa_flags & ~SA_SIGINFO) | (a->flags & SA_SIGINFO);
	if (a->flags & SA_SIGINFO)
		old->sa_sigaction = a->action;
	else
		old->sa_handler = a->handler;
}

FERRY_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	const struct sys_fns *c = sys();
	if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP)
		return c->sigaction(sig, act, old);
	const struct sig_app *prev = __atomic_load_n(&sig_current[sig], __ATOMIC_ACQUIRE);
	struct sigaction kold;
	int rc;
	if (act && signal_catches(act)) {
		/* Published first: a signal that comes while the kernel still
		 * has the trampoline finds a handler either way. */
		const struct sig_app *a = sig_publish(sig, act);
		__atomic_store_n(&sig_current[sig], a, __ATOMIC_RELEASE);
		struct sigaction k = *act;
		k.sa_sigaction = sig_trampoline;
		k.sa_flags |= SA_SIGINFO;
		rc = c->sigaction(sig, &k, &kold);
		if (rc != 0)
			__atomic_store_n(&sig_current[sig], prev, __ATOMIC_RELEASE);
	} else {
		rc = c->sigaction(sig, act, &kold);
		if (rc == 0 && act)
			__atomic_store_n(&sig_current[sig], NULL, __ATOMIC_RELEASE);
	}
	if (rc == 0 && old) {
		*old = kold;
		sig_as_set(old, prev);
	}
	return rc;
}

FERRY_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
	struct sigaction act = {.sa_handler = handler}, old;
	sigemptyset(&act.sa_mask);
	if (sig > 0 && sig < NSIG) {
		sigaddset(&act.sa_mask, sig);
		if (!__atomic_load_n(&sig_interrupts[sig], __ATOMIC_RELAXED))
			act.sa_flags = SA_RESTART;
	}
	if (sigaction(sig, &act, &old) != 0)
		return SIG_ERR;
	return old.sa_handler;
}

FERRY_EXPORT int siginterrupt(int sig, int flag)
{
	struct sigaction act;
	if (sigaction(sig, NULL, &act) != 0)
		return -1;
	if (sig > 0 && sig < NSIG)
		__atomic_store_n(&sig_interrupts[sig], flag != 0, __ATOMIC_RELAXED);
	if (flag)
		act.sa_flags &= ~SA_RESTART;
	else
		act.sa_flags |= SA_RESTART;
	return sigaction(sig, &act, NULL);
}
