#!/bin/sh
# The process models over a lossy datapath: postgres.sh (a backend per
# connection, each taken over from the postmaster; pgbench -i, -S and -S -C)
# and process.sh (fork, exec, spawn, prefork, descriptor passing and the
# rest) run as they are, with FERRY_FAULT dropping, duplicating and
# reordering 5% of the packets every process receives. One random seed a run,
# logged for a rerun (FERRY_FAULT=... sh postgres.sh). Under loss postgres.sh
# found a backend reading its connection as reset, and a request nobody sent
# again.
# Usage: lossy_apps.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need od
need_ferry
counting || skip "FERRY_FAULT is ferry's; the kernel has nothing to compare here"

export FERRY_FAULT="drop=0.05,dup=0.05,reorder=0.05,seed=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')"
log "$FERRY_FAULT"
ran=0
for t in postgres process; do
	sh "$(dirname "$0")/$t.sh" "$transport" >"$work/$t.out" 2>&1
	case $? in
	0) ran=$((ran + 1)); log "$t.sh: passed" ;;
	77) log "$t.sh: $(grep '^SKIP' "$work/$t.out" | head -1)" ;;
	*) fail "$t.sh under $FERRY_FAULT: $(tail -15 "$work/$t.out")" ;;
	esac
done
[ $ran -gt 0 ] || skip "neither postgres.sh nor process.sh can run here"
echo "PASS: lossy_apps over ferry ($transport, $FERRY_FAULT)"
