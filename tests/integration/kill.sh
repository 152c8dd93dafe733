#!/bin/sh
# The server is SIGKILLed under load: every client connection must see the
# end (EOF, or a reset where it had a request in flight) and no client may
# hang. The failure timeout is ten minutes, so only the notice of the
# server's death can end the clients' waits; the bound below is one only a
# broken notice exceeds (the notice takes about a millisecond, bench/notice).
# Usage: kill.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need redis-server redis-benchmark ss
need_ferry

export FERRY_FAILURE_TIMEOUT_MS=600000
limit=5000
hold=$builddir/tests/integration/connhold
[ -x "$hold" ] || fail "$hold not built"
conns=16

port=$(free_port)
bgf server redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$work" --protected-mode no --daemonize no
server=$last_pid
wait_listen "$port"

bgf bench redis-benchmark -p "$port" -c 20 -n 100000000 -t set,get -q
bench=$last_pid
bgf hold "$hold" "$port" "$conns"
holder=$last_pid
wait_line hold ready "$holder"
sleep 0.5 # let the load run
kill -0 "$bench" 2>/dev/null || fail "redis-benchmark is not running: $(tail -2 "$work/bench.log")"

t0=$(date +%s%N)
kill -KILL "$server"
log "killed redis-server $server under load"

# Both clients must finish by themselves; note when the benchmark goes.
bench_end=
i=0
while kill -0 "$holder" 2>/dev/null || kill -0 "$bench" 2>/dev/null; do
	[ -z "$bench_end" ] && ! kill -0 "$bench" 2>/dev/null && bench_end=$(date +%s%N)
	i=$((i + 1))
	[ $i -lt 600 ] || fail "a client hangs 30 s after the server's death: $(grep -c ' end ' "$work/hold.log") of $conns connections ended"
	sleep 0.05
done
[ -n "$bench_end" ] || bench_end=$(date +%s%N)
wait "$holder" || fail "connhold failed: $(tail -2 "$work/hold.log")"

ended=$(grep -c '^conn [0-9]* end ' "$work/hold.log")
expect_eq "connections that saw the end" "$ended" "$conns"
kinds=$(sed -n 's/^conn [0-9]* end \([A-Z]*\) .*/\1/p' "$work/hold.log" | sort | uniq -c | tr -s ' \n' ' ')
log "how they ended:$kinds"
worst=$(sed -n 's/^conn [0-9]* end [A-Z]* \([0-9]*\)/\1/p' "$work/hold.log" |
	awk -v t0="$t0" 'BEGIN {m = 0} {d = ($1 - t0) / 1e6; if (d > m) m = d} END {printf "%d", m}')
bench_ms=$(((bench_end - t0) / 1000000))
log "slowest connection: $worst ms, redis-benchmark gone after <= $bench_ms ms (limit $limit ms)"
[ "$worst" -le "$limit" ] || fail "a connection saw the death after $worst ms, more than $limit ms"
[ "$bench_ms" -le "$limit" ] || fail "redis-benchmark took $bench_ms ms to notice, more than $limit ms"
grep -qi 'error\|closed\|reset' "$work/bench.log" || fail "redis-benchmark ended without reporting an error: $(tail -c 300 "$work/bench.log")"

if counting; then
	# The clients' counters prove the load ran over ferry; the server wrote none.
	counter_ge "streams_connected (benchmark + connhold)" \
		$(($(stat_sum streams_connected bench) + $(stat_sum streams_connected hold))) $((20 + conns))
	counter_eq "client fallbacks" $(($(stat_sum fallbacks bench) + $(stat_sum fallbacks hold))) 0
	counter_ge "dead_peers seen by connhold" "$(stat_sum dead_peers hold)" 1
fi
echo "PASS: server killed under load, every connection ended within $limit ms ($transport)"
