#!/bin/sh
# An application over a lossy datapath: redis-server and every client
# preloaded with FERRY_FAULT dropping, duplicating and reordering 1% of the
# packets each receives. A 4 MB value, and every value redis-benchmark wrote
# (read back with one MGET), must come back byte for byte; the counters must
# show the faults were injected and repaired, and no connection fell back to
# the kernel. Usage: fault.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need redis-server redis-cli redis-benchmark ss od cmp
need_ferry
counting || skip "FERRY_FAULT is ferry's; the kernel has nothing to compare here"

export FERRY_FAULT="drop=0.01,dup=0.01,reorder=0.01,seed=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')"
log "$FERRY_FAULT"
port=$(free_port)
cli() { # redis-cli over ferry, bounded
	timeout 120 "$ferry_run" --transport "$transport" --stats "$work/stats-cli-%p.json" \
		redis-cli -p "$port" "$@"
}

bgf server redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$work" --protected-mode no --daemonize no
server=$last_pid
wait_listen "$port"

# --- a large value, both ways through the faults
size=$((4 * 1024 * 1024))
head -c "$size" /dev/urandom >"$work/value"
[ "$(cli -x SET big <"$work/value")" = OK ] || fail "SET of $size bytes failed"
cli --raw GET big >"$work/got" || fail "GET of $size bytes failed"
head -c "$size" "$work/got" | cmp -s - "$work/value" || fail "GET of $size bytes: content differs"
[ "$(($(wc -c <"$work/got") - 1))" -eq "$size" ] || fail "GET of $size bytes: length differs"
log "4 MB value: SET and GET byte for byte"

# --- redis-benchmark: 1000 keys of 2000 bytes each, from 20 connections
keys=1000 dsize=2000
timeout 300 "$ferry_run" --transport "$transport" --stats "$work/stats-bench-%p.json" \
	redis-benchmark -p "$port" -c 20 -n 40000 -r "$keys" -d "$dsize" -t set,get -q \
	>"$work/bench.out" 2>&1 || fail "redis-benchmark failed: $(tail -3 "$work/bench.out")"
grep -qi 'error' "$work/bench.out" && fail "redis-benchmark reported errors: $(grep -i error "$work/bench.out" | head -3)"
tr "\r" "\n" <"$work/bench.out" | grep -q "^GET: " || fail "redis-benchmark did not finish: $(tail -c 300 "$work/bench.out")"
# Its keys are key:000000000000 to key:000000000999 (those it drew), each
# holding the one payload of dsize bytes it made for the run: all of them,
# read back in one MGET, must be that payload.
awk -v n="$keys" 'BEGIN { for (i = 0; i < n; i++) printf "key:%012d\n", i }' >"$work/keys"
# shellcheck disable=SC2046 # one argument per key
cli --raw MGET $(cat "$work/keys") >"$work/values" || fail "MGET failed"
expect_eq "values returned" "$(wc -l <"$work/values")" "$keys"
grep -v -x '' "$work/values" | sort | uniq -c >"$work/distinct"
expect_eq "distinct values stored" "$(wc -l <"$work/distinct")" 1
expect_eq "payload length" "$(awk '{print length($2)}' "$work/distinct")" "$dsize"
expect_ge "keys written by the benchmark and verified" "$(awk '{print $1}' "$work/distinct")" $((keys / 2))

kill -TERM "$server"
wait_exit "$server" 30 || fail "redis-server exited with an error"
check_transport
expect_ge "packets dropped by the fault injector" "$(stat_sum drop_fault)" 1
expect_ge "retransmissions" "$(stat_sum retransmits)" 1
expect_eq "fallbacks" "$(stat_sum fallbacks)" 0
expect_eq "dead peers" "$(stat_sum dead_peers)" 0
expect_ge "streams over ferry" "$(stat_sum streams_accepted server)" 20
echo "PASS: redis through 1% drop, duplication and reordering, every byte verified ($transport)"
