#!/bin/sh
# memcached with 4 worker threads (it accepts on one thread and serves on the
# others) under memcaslap with data verification and memcslap, all preloaded;
# no errors, and the counters show ferry carried it. Usage: memcached.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need memcached ss
need_ferry
command -v memcaslap >/dev/null 2>&1 || command -v memcslap >/dev/null 2>&1 ||
	skip "neither memcaslap nor memcslap is installed (libmemcached-tools)"

port=$(free_port)
# memcached refuses to run as root without a user to switch to.
user=
chmod 1777 "$work" # memcached writes its counters as that user
# Over udp the usual deployment is tested: started as root, serving as
# nobody. softib's fabric is per user by design (mode 0600, like any
# shared-memory IPC), so there memcached serves as its clients' user.
if [ "$(id -u)" = 0 ]; then
	if [ "$transport" = softib ]; then user="-u root"; else user="-u nobody"; fi
fi
bgf server memcached $user -t 4 -p "$port" -U 0 -l 127.0.0.1 -m 64 -c 1024
server=$last_pid
wait_listen "$port"
log "memcached pid $server on port $port over $transport"

ran=0
if command -v memcaslap >/dev/null 2>&1; then
	# Every get is checked against what was set (--verify=1.0).
	timeout 300 "$ferry_run" --transport "$transport" --stats "$work/stats-aslap-%p.json" \
		memcaslap -s "127.0.0.1:$port" -T 2 -c 16 -x 20000 --verify=1.0 -b \
		>"$work/aslap.log" 2>&1 || fail "memcaslap failed: $(tail -3 "$work/aslap.log")"
	val() { sed -n "s/^$1: *\([0-9]*\).*/\1/p" "$work/aslap.log" | tail -1; }
	expect_eq "memcaslap verify_failed" "$(val verify_failed)" 0
	expect_eq "memcaslap verify_misses" "$(val verify_misses)" 0
	expect_eq "memcaslap get_misses" "$(val get_misses)" 0
	expect_ge "memcaslap gets" "$(val cmd_get)" 10000
	expect_ge "memcaslap sets" "$(val cmd_set)" 1000
	grep -q 'Ops: 20000' "$work/aslap.log" || fail "memcaslap did not run 20000 ops: $(tail -1 "$work/aslap.log")"
	ran=$((ran + 1))
fi
if command -v memcslap >/dev/null 2>&1; then
	for t in set get; do
		timeout 300 "$ferry_run" --transport "$transport" --stats "$work/stats-slap-%p.json" \
			memcslap -s "127.0.0.1:$port" -t $t -c 4 -e 2000 >"$work/slap-$t.log" 2>&1 ||
			fail "memcslap -t $t failed: $(tail -3 "$work/slap-$t.log")"
		grep -qi 'failure\|error' "$work/slap-$t.log" && fail "memcslap -t $t: $(grep -i 'failure\|error' "$work/slap-$t.log" | head -1)"
		grep -q "Time to $t *8000 keys" "$work/slap-$t.log" ||
			fail "memcslap -t $t did not run 8000 keys: $(tail -3 "$work/slap-$t.log")"
	done
	ran=$((ran + 1))
fi

# The server's own view: gets hit, nothing refused.
stats=$(printf 'stats\r\nquit\r\n' | timeout 30 "$ferry_run" --transport "$transport" \
	--stats "$work/stats-probe-%p.json" "$builddir/tests/integration/tcpcat" 127.0.0.1 "$port")
stat() { echo "$stats" | tr -d '\r' | sed -n "s/^STAT $1 //p"; }
expect_ge "memcached threads" "$(stat threads)" 4
expect_eq "memcached rejected_connections" "$(stat rejected_connections)" 0
expect_ge "memcached get_hits" "$(stat get_hits)" 10000

kill -TERM "$server"
wait_exit "$server" 30 || fail "memcached exited with an error"
check_transport
counter_eq "server fallbacks+kernel_accepts" $(($(stat_sum fallbacks server) + $(stat_sum kernel_accepts server))) 0
counter_eq "client fallbacks" $(($(stat_sum fallbacks aslap) + $(stat_sum fallbacks slap))) 0
counter_ge "server streams_accepted" "$(stat_sum streams_accepted server)" 16
counter_ge "client streams_connected" \
	$(($(stat_sum streams_connected aslap) + $(stat_sum streams_connected slap))) 16
counter_ge "server bytes_rx" "$(stat_sum bytes_rx server)" 1000000
echo "PASS: memcached over ferry ($transport), $ran load generator(s)"
