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
timeout 900 "$ferry_run" --transport "$transport" --stats "$work/stats-sock-%p.json" \
	"$prog" "$@" >"$work/ferry.out" 2>"$work/ferry.log"
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
[ "$connected" -gt 0 ] && [ "$accepted" -gt 0 ] || {
	echo "ferry did not carry the streams (streams_connected=$connected, streams_accepted=$accepted)"
	status=1
}
[ $status -eq 0 ] || fail "socket semantics differ under ferry (see above)"
echo "PASS: same results under the kernel and ferry ($transport)"
