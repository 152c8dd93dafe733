#!/bin/sh
# An idle ferry process uses no CPU: a preloaded redis-server with a
# preloaded client holding an open stream, both idle, must not spin (ferry
# spins at most FERRY_SPIN_US after activity, then sleeps in the kernel).
# The bound is loose on purpose: 10% of one core over 3 s catches a spinning
# thread (100%) without depending on the machine's load. Usage: idle.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need redis-server redis-cli ss
need_ferry

port=$(free_port)
bgf server redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
	--protected-mode no --daemonize no --hz 1
server=$last_pid
wait_listen "$port"
bgf sub redis-cli -p "$port" SUBSCRIBE idle
sub=$last_pid
i=0
until grep -q '^subscribe' "$work/sub.log"; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "the client never subscribed"
	sleep 0.1
done
r=$(timeout 30 "$ferry_run" --transport "$transport" --stats "$work/stats-pub-%p.json" \
	redis-cli -p "$port" PUBLISH idle wake) || fail "PUBLISH failed"
expect_eq "subscribers reached" "$r" 1
sleep 1 # past any spinning after that burst

ticks() { # pid: user + system CPU time in clock ticks
	awk '{print $14 + $15}' "/proc/$1/stat"
}
hz=$(getconf CLK_TCK)
s0=$(ticks "$server")
c0=$(ticks "$sub")
sleep 3
s1=$(ticks "$server")
c1=$(ticks "$sub")
limit=$((hz * 3 / 10))
expect_ge "server still alive" "$(kill -0 "$server" && echo 1 || echo 0)" 1
log "CPU over 3 s idle: server $((s1 - s0)) ticks, client $((c1 - c0)) ticks (limit $limit, $hz ticks/s)"
[ $((s1 - s0)) -le "$limit" ] || fail "the idle server used $((s1 - s0)) ticks of CPU in 3 s: something spins"
[ $((c1 - c0)) -le "$limit" ] || fail "the idle client used $((c1 - c0)) ticks of CPU in 3 s: something spins"

# Still working after the idle period, over ferry.
r=$(timeout 30 "$ferry_run" --transport "$transport" --stats "$work/stats-pub-%p.json" \
	redis-cli -p "$port" PUBLISH idle again) || fail "PUBLISH after idling failed"
expect_eq "subscribers reached after idling" "$r" 1
kill -TERM "$server"
wait_exit "$server" 30 || fail "redis-server exited with an error"
check_transport server
counter_ge "server streams_accepted" "$(stat_sum streams_accepted server)" 3
counter_eq "client fallbacks" "$(stat_sum fallbacks pub)" 0
echo "PASS: idle ferry processes use no CPU ($transport)"
