/*
 * ferry-stat: every ferry process of this user (root: of every user), live,
 * from the files they keep in /dev/shm (preload/statmap_layout.h). Exit 0
 * when the view was shown, 1 when -p names no ferry process we may see, 2
 * for a bad option.
 */
#include "autoconfig.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compat/stat_read.h"
#include "compat/stat_show.h"

/* How long a process may take to write its tables: its progress thread
 * answers at once unless the process is stopped or the machine starved. */
#define STAT_WAIT_MS 200u

static volatile sig_atomic_t stat_stop;

static void stat_on_signal(int sig)
{
	(void)sig;
	stat_stop = 1;
}

static void stat_usage(FILE *out)
{
	fprintf(out, "usage: ferry-stat [--watch] [--json] [-p PID]\n"
		     "Shows the ferry processes of this host, live (see ferry-stat(1)).\n");
}

/* One view; 1 when -p named no ferry process, 0 otherwise, -1 on error. */
static int stat_once(pid_t only, bool json)
{
	struct stat_view v;
	int rc = stat_read(only, STAT_WAIT_MS, &v);
	if (rc < 0) {
		fprintf(stderr, "ferry-stat: %s\n", strerror(-rc));
		stat_view_free(&v);
		return -1;
	}
	if (only && !v.n) {
		fprintf(stderr, "ferry-stat: %d is not a ferry process this user may see\n",
			(int)only);
		stat_view_free(&v);
		return 1;
	}
	if (json)
		stat_show_json(stdout, &v);
	else
		stat_show_text(stdout, &v);
	fflush(stdout);
	stat_view_free(&v);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"watch", no_argument, NULL, 'w'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	bool watch = false, json = false;
	pid_t only = 0;
	int c;
	while ((c = getopt_long(argc, argv, "p:h", opts, NULL)) != -1) {
		char *end;
		long pid;
		switch (c) {
		case 'w':
			watch = true;
			break;
		case 'j':
			json = true;
			break;
		case 'p':
			errno = 0;
			pid = strtol(optarg, &end, 10);
			if (errno || *end || pid <= 0 || pid > (1L << 22)) {
				fprintf(stderr, "ferry-stat: -p wants a process ID, not '%s'\n", optarg);
				return 2;
			}
			only = (pid_t)pid;
			break;
		case 'h':
			stat_usage(stdout);
			return 0;
		default:
			stat_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		stat_usage(stderr);
		return 2;
	}
	if (!watch)
		return stat_once(only, json) == 0 ? 0 : 1;
	signal(SIGINT, stat_on_signal);
	signal(SIGTERM, stat_on_signal);
	bool tty = isatty(STDOUT_FILENO);
	while (!stat_stop) {
		if (tty && !json)
			fputs("\033[H\033[2J", stdout); /* home and clear, as top redraws */
		if (stat_once(only, json) != 0)
			return 1;
		sleep(1);
	}
	return 0;
}
