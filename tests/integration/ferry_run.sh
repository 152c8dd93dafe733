#!/bin/sh
# ferry-run: flags become FERRY_* variables, the library goes first in
# LD_PRELOAD (keeping what was there), the build-tree copy uses the build
# tree's library and any other copy the installed one, bad flags are refused,
# and a preloaded program really runs over ferry. Usage: ferry_run.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need env cmp
[ -x "$ferry_run" ] || fail "$ferry_run not built"

tab=$(printf '\t')
lib=$("$ferry_run" --print-lib | cut -f1)
expect_eq "build-tree library" "$("$ferry_run" --print-lib)" "$builddir/.libs/libferry.so${tab}build tree"
# A copy anywhere else is an installed one, whose library sits in
# $(libdir)/ferry (pkglibdir), never on ld.so's search path.
mkdir -p "$work/bin"
cp "$ferry_run" "$work/bin/ferry-run"
other=$("$work/bin/ferry-run" --print-lib)
case $other in
*/ferry/libferry.so"${tab}installed") ;;
*) fail "an installed copy would preload '$other'" ;;
esac
log "installed copy preloads $other"
expect_eq "FERRY_LIB override" "$(FERRY_LIB=/x/libferry.so "$ferry_run" --print-lib)" "/x/libferry.so${tab}FERRY_LIB"
expect_eq "--lib override" "$("$ferry_run" --lib /y/libferry.so --print-lib)" "/y/libferry.so${tab}--lib"

# Flags to variables, both spellings; the wrapped program sees them.
[ -f "$lib" ] || skip "libferry.so not built ($lib)"
flag_transport=$transport
counting || flag_transport=udp
"$ferry_run" --transport="$flag_transport" --ports 6379,7000-7999 --spin-us=7 --peers 10.0.0.1:6379 \
	--log info --log-file "$work/ferry.log" --stats="$work/s-%p.json" --disable \
	env >"$work/env.out" || fail "ferry-run env failed"
for kv in "FERRY_TRANSPORT=$flag_transport" FERRY_PORTS=6379,7000-7999 FERRY_SPIN_US=7 \
	FERRY_PEERS=10.0.0.1:6379 FERRY_LOG=info "FERRY_LOG_FILE=$work/ferry.log" \
	"FERRY_STATS=$work/s-%p.json" FERRY_ENABLE=0; do
	grep -qx "$kv" "$work/env.out" || fail "the program did not get $kv"
done
preload=$(sed -n 's/^LD_PRELOAD=//p' "$work/env.out")
case " $preload " in
*" $lib "*) ;;
*) fail "LD_PRELOAD is '$preload', without $lib" ;;
esac
kept=$(LD_PRELOAD=/lib/none.so "$ferry_run" env 2>/dev/null | sed -n 's/^LD_PRELOAD=//p')
case "$kept" in
*"$lib /lib/none.so") log "an existing LD_PRELOAD is kept after ours" ;;
*) fail "LD_PRELOAD became '$kept'" ;;
esac
twice=$("$ferry_run" "$ferry_run" env | sed -n 's/^LD_PRELOAD=//p' | tr ' ' '\n' | grep -c "libferry.so")
expect_eq "libferry in LD_PRELOAD after nesting ferry-run" "$twice" 1

# Refusals: exit status 2 and a message, the program never runs.
for bad in "--transport tcp" "--spin-us fast" "--log loud" "--bogus" "--ports"; do
	# shellcheck disable=SC2086
	"$ferry_run" $bad true 2>"$work/err" && fail "ferry-run $bad was accepted"
	[ $? -eq 2 ] && [ -s "$work/err" ] || fail "ferry-run $bad: no exit status 2 with a message"
done
"$ferry_run" >/dev/null 2>&1 && fail "ferry-run without a program succeeded"
"$ferry_run" --help | grep -q -- '--transport' || fail "--help does not describe the flags"
log "bad flags refused"

# A real round trip through the wrapper, with counters proving the path.
if counting; then
	need redis-server redis-cli ss
	ping_redis "$(free_port)" "$ferry_run" --transport "$transport" \
		--stats "$work/stats-server-%p.json"
	check_transport
	counter_ge "streams_connected" "$(stat_sum streams_connected cli)" 1
	counter_ge "streams_accepted" "$(stat_sum streams_accepted server)" 1
fi
# libibverbs (and the netlink libraries it pulls) is opened by the ib
# datapath alone: a process on this one, or on auto where the kernel shows
# no verbs device, never maps it (it cost every exec 250 us).
if [ -f "$lib" ] && command -v python3 >/dev/null; then
	for t in $flag_transport auto; do
		[ "$t" = auto ] && ls /sys/class/infiniband_verbs/* >/dev/null 2>&1 && continue
		"$ferry_run" --transport "$t" --stats "$work/maps-%p.json" python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
sys.stdout.write(open("/proc/self/maps").read())' >"$work/maps.out" || fail "python3 under ferry-run failed"
		grep -q libferry "$work/maps.out" || fail "the process did not map libferry ($t)"
		ls "$work"/maps-*.json >/dev/null 2>&1 || fail "ferry did not start in the process ($t)"
		rm -f "$work"/maps-*.json
		if grep -E "libibverbs|libnl-" "$work/maps.out"; then
			fail "a $t process mapped libibverbs"
		fi
	done
	log "no libibverbs in a $flag_transport or auto process"
fi
echo "PASS: ferry-run ($transport)"
