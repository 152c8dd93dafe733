/*
 * Progress: who runs the endpoint's event loop. Any application thread
 * inside a ferry call runs it under a try-lock (progress_run); a background
 * thread runs it when none does, so retransmission timers fire and blocked
 * threads wake, and sleeps in the kernel on the nic's notification fd when
 * the process is idle (no CPU).
 */
#ifndef FERRY_PRELOAD_PROGRESS_H
#define FERRY_PRELOAD_PROGRESS_H

struct rpc;
struct ferry_config;

/* Starts the background thread; waiting threads spin spin_us (FERRY_SPIN_US)
 * before they sleep. 0 or -errno. */
int progress_start(struct rpc *rpc, const struct ferry_config *cfg, unsigned spin_us);
/* Asks the background thread to write FERRY_STATS (async-signal-safe). */
void progress_request_dump(void);
/* The nic's notify fd now names another socket (mgmt_set_widen_handler):
 * the thread registers it again. Any thread. */
void progress_nic_replaced(void);
/* Writes were deferred, or requests are in flight: make sure the thread
 * sends them, and runs their retransmission timers, if the application
 * does not come back to ferry soon (a write then a sleep in some other
 * call, or a sleep in ferry, which has no timer of its own). Cheap unless
 * the thread is in a sleep without a timeout. */
void progress_note_work(void);
/* Holds the thread still where it holds nothing, until progress_release
 * (fork: transport/thread_pause.h); at once when there is none. */
void progress_hold(void);
void progress_release(void);
/* Forgets the thread without touching it (fork child: it does not exist). */
void progress_forget(void);

#endif
