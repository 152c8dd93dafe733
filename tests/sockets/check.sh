#!/bin/sh
# Socket semantics, kernel against ferry: runs tests/sockets/sockcheck plainly
# (every check asserts the kernel's answer), then with both ends preloaded
# through ferry-run, and requires identical output and counters proving that
# ferry carried the streams. Usage: check.sh [TRANSPORT] [SCENARIO...]
. "$(dirname "$0")/../integration/lib.sh"
[ $# -gt 0 ] && shift

prog=$builddir/tests/sockets/sockcheck
[ -x "$prog" ] || fail "$prog not built"

log "kernel run"
timeout 600 "$prog" "$@" >"$work/kernel.out" 2>"$work/kernel.log"
rc=$?
if [ $rc -ne 0 ]; then
	grep -E 'FAIL|FATAL|TIMEOUT|^not ok' "$work/kernel.out"
	fail "the scenarios fail under the kernel itself (status $rc)"
fi
tail -1 "$work/kernel.out"

need_ferry
log "ferry run ($transport)"
FERRY_TEST_PATHS=$work/paths timeout 900 "$ferry_run" --transport "$transport" \
	--stats "$work/stats-sock-%p.json" "$prog" "$@" >"$work/ferry.out" 2>"$work/ferry.log"
rc=$?
tail -1 "$work/ferry.out"

status=0
if ! diff -u "$work/kernel.out" "$work/ferry.out" >"$work/diff.txt"; then
	echo "--- differences, kernel (-) against ferry (+):"
	grep '^[-+][^-+]' "$work/diff.txt"
	grep '^not ok' "$work/ferry.out" | sed 's/^not ok [0-9]* - /failing under ferry: /'
	status=1
fi
[ $rc -eq 0 ] || { echo "sockcheck under ferry exited with status $rc"; status=1; }

# The driver opens no socket, so every stats file is a scenario role's.
connected=$(stat_sum streams_connected sock)
accepted=$(stat_sum streams_accepted sock)
log "counters: $(stat_files sock) processes, streams_connected=$connected" \
	"streams_accepted=$accepted fallbacks=$(stat_sum fallbacks sock)" \
	"kernel_accepts=$(stat_sum kernel_accepts sock)"
check_transport sock
# Scenario by scenario: each role's connections rode ferry, except
# connect_refused, whose client must go to the kernel (nobody listens).
not_carried=$(awk '
	$3 == "no-counters" { next }   # killed on purpose, or hung (the diff says so)
	{
		for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] + 0 }
		if ($1 == "connect_refused") {
			if ($2 == "client" && (v["fallbacks"] < 1 || v["connected"] != 0))
				print $1 " " $2 ": expected a kernel fallback, got " $3 " " $5
		} else if ($2 == "client" && (v["connected"] < 1 || v["fallbacks"] != 0)) {
			print $1 " client: " $3 " " $5
		} else if ($2 == "server" && (v["accepted"] < 1 || v["kernel_accepts"] != 0)) {
			print $1 " server: " $4 " " $6
		}
	}' "$work/paths")
if [ -n "$not_carried" ]; then
	echo "--- scenarios that ferry did not carry:"
	echo "$not_carried"
	status=1
fi
[ "$connected" -gt 0 ] && [ "$accepted" -gt 0 ] || {
	echo "ferry did not carry the streams (streams_connected=$connected, streams_accepted=$accepted)"
	status=1
}
[ $status -eq 0 ] || fail "socket semantics differ under ferry (see above)"
echo "PASS: same results under the kernel and ferry ($transport)"
