#!/bin/sh
# redis-server and its clients, all preloaded: values of 1 B to 1 MB read back
# byte for byte, a 10,000-command pipeline, pub/sub, BGSAVE (fork) while
# redis-benchmark runs with every request answered, the default benchmark
# list; the counters must show ferry carried it all. Usage: redis.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need redis-server redis-cli redis-benchmark ss od cmp
need_ferry

port=$(free_port)
cli() { # redis-cli over ferry, bounded
	timeout 120 "$ferry_run" --transport "$transport" --stats "$work/stats-cli-%p.json" \
		redis-cli -p "$port" "$@"
}

bgf server redis-server --port "$port" --bind "127.0.0.1 ::1" --save "" --appendonly no \
	--dir "$work" --dbfilename dump.rdb --protected-mode no --daemonize no
server=$last_pid
wait_listen "$port"
log "redis-server pid $server on port $port over $transport"

# --- values of 1 B to 1 MB, random bytes, read back byte for byte
sizes="1 2 3 100 1000 4095 4096 4097 65536 100000 524288 1000000 1048575 1048576"
for i in 1 2 3 4; do sizes="$sizes $(($(od -An -N4 -tu4 /dev/urandom) % 1048576 + 1))"; done
total=0
for size in $sizes; do
	head -c "$size" /dev/urandom >"$work/value"
	reply=$(cli -x SET "key:$size" <"$work/value" 2>"$work/cli.err") ||
		fail "SET of $size bytes: redis-cli failed: $(cat "$work/cli.err")"
	[ "$reply" = OK ] || fail "SET of $size bytes answered '$reply'"
	cli --raw GET "key:$size" >"$work/got" 2>"$work/cli.err" ||
		fail "GET of $size bytes: redis-cli failed: $(cat "$work/cli.err")"
	# redis-cli ends the raw value with a newline of its own.
	got=$(($(wc -c <"$work/got") - 1))
	[ "$got" -eq "$size" ] || fail "GET of $size bytes returned $got bytes"
	head -c "$size" "$work/got" | cmp -s - "$work/value" || fail "GET of $size bytes: content differs"
	total=$((total + size))
done
log "SET/GET byte-for-byte: $(echo $sizes | wc -w) values, $total bytes"

# --- the same over IPv6
v=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
[ "$(cli -h ::1 SET v6key "$v")" = OK ] || fail "SET over ::1 failed"
[ "$(cli -h ::1 GET v6key)" = "$v" ] || fail "GET over ::1 returned the wrong value"
log "IPv6 (::1): SET/GET"

# --- a pipeline of 10,000 commands in one connection
awk 'BEGIN { for (i = 0; i < 10000; i++) { k = "pipe:" i; v = "value-" i;
	printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, length(v), v } }' \
	>"$work/pipeline"
cli --pipe <"$work/pipeline" >"$work/pipe.out" 2>&1 || fail "redis-cli --pipe failed: $(tail -1 "$work/pipe.out")"
grep -q 'errors: 0, replies: 10000' "$work/pipe.out" || fail "pipeline: $(tail -1 "$work/pipe.out")"
for i in 0 4999 9999; do
	v=$(cli GET "pipe:$i")
	[ "$v" = "value-$i" ] || fail "pipeline key pipe:$i holds '$v'"
done
log "pipeline: 10000 replies, no errors"

# --- pub/sub: 100 messages in order to a subscriber
bgf sub redis-cli -p "$port" SUBSCRIBE news
sub=$last_pid
i=0
while [ "$(cli PUBSUB NUMSUB news | tail -1)" != 1 ]; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "the subscriber never subscribed"
	sleep 0.1
done
seq 0 99 | sed 's/^/PUBLISH news msg-/' | cli >"$work/pub.out" || fail "publisher failed"
[ "$(grep -c '^1$' "$work/pub.out")" -eq 100 ] || fail "PUBLISH reached $(grep -c '^1$' "$work/pub.out") of 100 times one subscriber"
i=0
while ! grep -q '^msg-99$' "$work/sub.log"; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "the subscriber did not get msg-99"
	sleep 0.1
done
[ "$(grep '^msg-' "$work/sub.log" | tr '\n' ' ')" = "$(seq 0 99 | sed 's/^/msg-/' | tr '\n' ' ')" ] ||
	fail "the subscriber got the messages wrong or out of order"
kill "$sub"
log "pub/sub: 100 messages in order"

# --- BGSAVE (fork) while redis-benchmark runs: every request answered
n=40000
bgf bench redis-benchmark -p "$port" -c 20 -n "$n" -r 100000 -d 64 -t set,get --csv
bench=$last_pid
i=0
while [ "$(cli INFO clients | tr -d '\r' | sed -n 's/^connected_clients://p')" -lt 21 ]; do
	i=$((i + 1))
	kill -0 "$bench" 2>/dev/null || break
	[ $i -lt 100 ] || fail "redis-benchmark never connected its 20 clients"
	sleep 0.05
done
saves=0
while kill -0 "$bench" 2>/dev/null && [ $saves -lt 3 ]; do
	r=$(cli BGSAVE)
	case $r in
	*"Background saving started"*) saves=$((saves + 1)) ;;
	*) fail "BGSAVE answered '$r'" ;;
	esac
	i=0
	while cli INFO persistence | grep -q 'rdb_bgsave_in_progress:1'; do
		i=$((i + 1))
		[ $i -lt 300 ] || fail "BGSAVE never finished"
		sleep 0.05
	done
	cli INFO persistence | grep -q 'rdb_last_bgsave_status:ok' || fail "BGSAVE failed"
done
[ $saves -ge 1 ] || fail "redis-benchmark finished before a BGSAVE could overlap it; raise n"
wait_exit "$bench" 300 || fail "redis-benchmark failed during BGSAVE: $(tail -3 "$work/bench.log")"
grep -q '^"SET"' "$work/bench.log" && grep -q '^"GET"' "$work/bench.log" ||
	fail "redis-benchmark did not report SET and GET: $(tail -3 "$work/bench.log")"
calls=$(cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_\(set\|get\):calls=\([0-9]*\),.*/\2/p' |
	awk '{s += $1} END {print s + 0}')
expect_ge "SET+GET calls the server answered" "$calls" $((2 * n))
[ -f "$work/dump.rdb" ] || fail "no dump.rdb after BGSAVE"
log "BGSAVE: $saves snapshots while redis-benchmark ran, all $((2 * n)) requests answered"

# --- redis-benchmark's default test list
timeout 300 "$ferry_run" --transport "$transport" --stats "$work/stats-deflist-%p.json" \
	redis-benchmark -p "$port" -c 10 -n 2000 --csv >"$work/deflist.log" 2>&1 ||
	fail "the default benchmark list failed: $(tail -3 "$work/deflist.log")"
tests=$(grep -c '^"[A-Z]' "$work/deflist.log")
expect_ge "default benchmark tests completed" "$tests" 20
grep -q '^"MSET' "$work/deflist.log" || fail "the default list did not reach MSET"

# --- counters: stop the server (it writes its counters at exit)
kill -TERM "$server"
wait_exit "$server" 30 || fail "redis-server exited with an error"
check_transport
counter_eq "server fallbacks+kernel_accepts" $(($(stat_sum fallbacks server) + $(stat_sum kernel_accepts server))) 0
counter_eq "client fallbacks" $(($(stat_sum fallbacks cli) + $(stat_sum fallbacks bench) + $(stat_sum fallbacks deflist))) 0
counter_ge "server streams_accepted" "$(stat_sum streams_accepted server)" 60
counter_ge "client streams_connected" \
	$(($(stat_sum streams_connected cli) + $(stat_sum streams_connected bench) + $(stat_sum streams_connected deflist))) 60
counter_ge "server bytes_rx" "$(stat_sum bytes_rx server)" "$total"
counter_ge "server bytes_tx" "$(stat_sum bytes_tx server)" "$total"
echo "PASS: redis over ferry ($transport)"
