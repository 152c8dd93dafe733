/* Lazy start of the process's ferry, its counters and their dump. */
#include "autoconfig.h"

#include "preload/ferry.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "mgmt/mgmt.h"
#include "mgmt/nexus.h"
#include "preload/fdtable.h"
#include "preload/handover.h"
#include "preload/lshare.h"
#include "preload/phpool.h"
#include "preload/progress.h"
#include "preload/reentry.h"
#include "preload/relay.h"
#include "preload/statmap.h"
#include "preload/stdfile.h"
#include "preload/stream.h"
#include "preload/wait.h"
#include "transport/clock.h"
#include "transport/log.h"
#include "transport/rpc.h"
#include "transport/sys.h"
#include "transport/txdefer.h"

struct ferry_proc ferry;

static pthread_mutex_t ferry_start_lock = PTHREAD_MUTEX_INITIALIZER;
/* Counters when there is no nexus (start failed): fallbacks still count. */
static struct ferry_stats ferry_local_stats;
static bool ferry_dump_at_exit;
static bool ferry_atexit_set; /* a daemon() child starts again: register once */
/* Depth of ferry_lock on this thread: handlers and callbacks that run
 * inside the event loop already hold the endpoint lock. */
static __thread int ferry_lock_depth __attribute__((tls_model("initial-exec")));

struct ferry_stats *ferry_stats(void)
{
	struct ferry_stats *st = __atomic_load_n(&ferry.stats, __ATOMIC_ACQUIRE);
	return st ? st : &ferry_local_stats;
}

void ferry_lock(void)
{
	ferry_internal_enter();
	if (ferry_lock_depth++ == 0) {
		txdefer_begin(); /* what the call sends leaves after the unlock */
		rpc_lock(ferry.rpc);
	}
}

void ferry_unlock(void)
{
	/* Whatever the call queued goes on the wire before the lock is let go:
	 * nobody else may run the loop soon (the progress thread sleeps while
	 * the process looks idle). */
	if (ferry_lock_depth == 1 && stream_take_tx_pending()) {
		stream_tx_deferred_clear();
		rpc_flush(ferry.rpc);
	}
	if (--ferry_lock_depth == 0) {
		bool busy = rpc_busy(ferry.rpc);
		rpc_unlock(ferry.rpc);
		txdefer_end();
		if (busy || stream_tx_deferred())
			progress_note_work();
	}
	ferry_internal_leave();
}

static bool ferry_flush_due(void)
{
	return stream_tx_deferred() || stream_held_pending();
}

void ferry_flush(void)
{
	if (ferry_state() != FERRY_ON || !ferry_flush_due())
		return;
	ferry_lock();
	ferry_flush_locked();
	ferry_unlock();
}

void ferry_flush_locked(void)
{
	if (!ferry_flush_due())
		return;
	/* Transmit only: the wait that follows receives. Answers the
	 * application did not fill with a reply go now, plainly. */
	stream_release_held(ferry.rpc);
	stream_tx_deferred_clear();
	rpc_flush(ferry.rpc);
}

void ferry_stats_dump(void)
{
	if (!ferry.cfg.stats_path[0])
		return;
	ferry_internal_enter();
	int rc = stats_write_file(ferry_stats(), ferry.transport ? ferry.transport : "none",
				  ferry.cfg.stats_path);
	ferry_internal_leave();
	if (rc)
		log_warn("FERRY_STATS=%s cannot be written: %s", ferry.cfg.stats_path, strerror(-rc));
}

/* Slots per session direction when FERRY_SLOTS is unset: the most the
 * transport takes. Credits follow (ferry_session_credits): two packets a
 * slot at least, more where packets are small. */
#define FERRY_PRELOAD_SLOTS 64u

/* How long exit may wait for written data to reach peers. */
#define FERRY_EXIT_DRAIN_NS (2000ull * 1000000ull)

/*
 * The exit drain found nothing: sleep until a packet comes or the
 * retransmission timers' grain passes, rather than spin. A spinning drain
 * took a whole CPU from the peer whose answer it waited for, and for the
 * full bound when that peer was gone (a fork-per-connection server's child
 * after its client exited). The endpoint is let go meanwhile: mgmt resets
 * the sessions of a peer it finds dead (a local one's pidfd says so at
 * once), and only with the endpoint; held throughout, the drain waited
 * out its bound on such a peer (softib: one xinetd client in ten).
 * False when the endpoint could not be taken back before end.
 */
static bool ferry_drain_sleep(uint64_t end)
{
	if (rpc_arm_notify(ferry.rpc) != 0)
		return true; /* packets are waiting, or there is no fd to sleep on */
	struct pollfd p = {.fd = rpc_notify_fd(ferry.rpc), .events = POLLIN};
	struct timespec grain = {0, 1000000};
	rpc_unlock(ferry.rpc);
	sys()->ppoll(&p, 1, &grain, NULL);
	while (!rpc_trylock(ferry.rpc)) {
		if (clock_now_ns() >= end)
			return false;
		sched_yield();
	}
	return true;
}

void ferry_exit_drain(void)
{
	relay_exit_wait(FERRY_EXIT_DRAIN_NS); /* a confined process's (relay.h) */
	if (ferry_state() == FERRY_ON && ferry_lock_depth == 0) {
		/*
		 * Bytes a send() accepted must reach the peer even when the
		 * process exits right after close(), as the kernel delivers a
		 * closed socket's buffer: send what is queued and the FINs, and
		 * wait for the answers, bounded (a dead peer answers nothing),
		 * and not at all for a peer known to be gone: a fork-per-
		 * connection server's child that exited as our FIN went out
		 * (xinetd's, inetd's) held every client's exit for the bound.
		 * Only a try for the lock: a thread stuck holding the endpoint
		 * must not hang the exit.
		 */
		handover_exit_wait(FERRY_EXIT_DRAIN_NS);
		uint64_t end = clock_now_ns() + FERRY_EXIT_DRAIN_NS;
		bool locked;
		while (!(locked = rpc_trylock(ferry.rpc)) && clock_now_ns() < end)
			sched_yield();
		if (locked) {
			ferry_internal_enter();
			stream_fin_all(ferry.rpc);
			/* Looked at before any sleep: a process with nothing in
			 * flight (its FINs answered, or no stream) leaves at once,
			 * not a sleep's grain later. */
			while (locked) {
				unsigned n = stream_run_once(ferry.rpc);
				if (!stream_delivery_pending(ferry.rpc) || clock_now_ns() >= end)
					break;
				if (n == 0 && !ferry_drain_sleep(end))
					locked = false;
			}
			if (locked) {
				rpc_run_once(ferry.rpc); /* the last answers */
				rpc_unlock(ferry.rpc);
			}
			ferry_internal_leave();
			/* Peers hear that our sessions end now: otherwise they take
			 * us for dead a failure timeout later, and say so. */
			mgmt_forget_rpc(ferry.mgmt, ferry.rpc);
		}
	}
	if (ferry_dump_at_exit && ferry_state() != FERRY_FORKED)
		ferry_stats_dump();
	statmap_close();
}

static void ferry_atexit(void)
{
	stdfile_flush();
	ferry_exit_drain();
}

static void ferry_dump_signal(int sig)
{
	(void)sig;
	progress_request_dump();
}

/* On-demand dump: SIGRTMIN+7, unless the application uses that signal. */
static void ferry_install_dump_signal(void)
{
	int sig = SIGRTMIN + FERRY_STATS_SIGNAL_OFFSET;
	struct sigaction old;
	if (sys()->sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL)
		return;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = ferry_dump_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sys()->sigaction(sig, &sa, NULL);
}

/* Reads the settings from the environment; false when ferry stays off. */
static bool ferry_read_config(void)
{
	char err[512];
	ferry_config_defaults(&ferry.cfg);
	int rc = preload_config_from_env(&ferry.pcfg, &ferry.cfg, err, sizeof(err));
	ferry_log_init(ferry.cfg.log_level, ferry.cfg.log_file);
	if (rc < 0) {
		log_error("%s; ferry stays off and every socket is the kernel's", err);
		ferry.cfg.stats_path[0] = '\0';
		return false;
	}
	/* Every connection between two processes rides one session, so the
	 * session's requests in flight are all its connections' at once: a
	 * bare RPC user's 8 slots would queue the ninth client's request
	 * behind the first eight answers. The transport's most, unless set. */
	if (!getenv("FERRY_SLOTS"))
		ferry.cfg.session_slots = FERRY_PRELOAD_SLOTS;
	return true;
}

static void ferry_widened(void *ctx)
{
	(void)ctx;
	wait_nic_replaced();
	progress_nic_replaced();
}

static void ferry_start_locked(void (*first_use)(void *arg), void *arg)
{
	if (!ferry.cfg_kept && !ferry_read_config()) {
		__atomic_store_n(&ferry.state, FERRY_OFF, __ATOMIC_RELEASE);
		return;
	}
	if (!ferry.pcfg.enable) {
		__atomic_store_n(&ferry.state, FERRY_OFF, __ATOMIC_RELEASE);
		return;
	}
	ferry_dump_at_exit = ferry.cfg.stats_path[0] != '\0';
	if (ferry_dump_at_exit && !ferry_atexit_set) {
		ferry_atexit_set = true;
		atexit(ferry_atexit);
	}
	int rc = fdtab.slots ? 0 : fdtable_init(&fdtab, 0);
	if (rc) {
		log_warn("ferry cannot start: no fd table (%s); sockets use the kernel", strerror(-rc));
		ferry.unavailable = true;
		__atomic_store_n(&ferry.state, FERRY_OFF, __ATOMIC_RELEASE);
		return;
	}
	phpool_grow_table(); /* before ferry's threads: see phpool.c */
	char msg[512] = "";
	int nerr = 0;
	/* Counted where ferry-stat reads them, when that can be had. */
	struct ferry_stats *shared = statmap_open();
	struct nexus *nx = nexus_create_counting(&ferry.cfg, shared, &nerr, msg, sizeof(msg));
	if (!nx) {
		statmap_close();
		log_warn("ferry cannot start (%s); sockets use the kernel", msg);
		ferry.unavailable = true;
		__atomic_store_n(&ferry.state, FERRY_OFF, __ATOMIC_RELEASE);
		return;
	}
	ferry.nx = nx;
	ferry.rpc = nexus_rpc(nx);
	ferry.mgmt = nexus_mgmt(nx);
	ferry.transport = nexus_transport(nx);
	statmap_set_transport(ferry.transport);
	__atomic_store_n(&ferry.stats, nexus_stats(nx), __ATOMIC_RELEASE);
	rpc_lock(ferry.rpc);
	rc = stream_init(ferry.rpc, ffile_notify);
	rpc_unlock(ferry.rpc);
	if (rc == 0) /* the next owner of a stream a child takes over dials us there */
		rc = mgmt_answer_on_control(ferry.mgmt, ferry.rpc);
	if (rc == 0) {
		mgmt_set_offer_handler(ferry.mgmt, lshare_on_offer, NULL);
		mgmt_set_widen_handler(ferry.mgmt, ferry_widened, NULL);
	}
	if (rc == 0 && first_use)
		first_use(arg);
	if (rc == 0)
		rc = progress_start(ferry.rpc, &ferry.cfg, ferry.pcfg.spin_us);
	if (rc) {
		log_warn("ferry cannot start: %s; sockets use the kernel", strerror(-rc));
		ferry.unavailable = true;
		__atomic_store_n(&ferry.stats, NULL, __ATOMIC_RELEASE);
		nexus_destroy(nx);
		statmap_close();
		ferry.nx = NULL;
		__atomic_store_n(&ferry.state, FERRY_OFF, __ATOMIC_RELEASE);
		return;
	}
	if (!ferry_atexit_set) {
		ferry_atexit_set = true;
		atexit(ferry_atexit);
	}
	if (ferry.cfg.stats_path[0])
		ferry_install_dump_signal();
	log_info("ferry on: transport %s, spin %u us", ferry.transport, ferry.pcfg.spin_us);
	__atomic_store_n(&ferry.state, FERRY_ON, __ATOMIC_RELEASE);
}

bool ferry_up(void)
{
	return ferry_up_then(NULL, NULL);
}

bool ferry_up_then(void (*first_use)(void *arg), void *arg)
{
	enum ferry_state st = ferry_state();
	if (st == FERRY_ON)
		return true;
	if (st != FERRY_UNINIT)
		return false;
	pthread_mutex_lock(&ferry_start_lock);
	if (ferry_state() == FERRY_UNINIT) {
		ferry_internal_enter();
		ferry_start_locked(first_use, arg);
		ferry_internal_leave();
	}
	pthread_mutex_unlock(&ferry_start_lock);
	return ferry_state() == FERRY_ON;
}

void ferry_forked_child(void)
{
	progress_forget();
	ferry_lock_depth = 0;
	pthread_mutex_init(&ferry_start_lock, NULL);
	ferry_dump_at_exit = false; /* until this process starts a ferry of its own */
	ferry.cfg_kept = true;
	__atomic_store_n(&ferry.state, FERRY_FORKED, __ATOMIC_RELEASE);
}
