#!/bin/sh
# haproxy in front of redis, every program preloaded, and haproxy's reload
# that hands its listener over: the new haproxy fetches the listening socket
# from the old one over its stats socket (-x, SCM_RIGHTS) and tells it to
# finish (-sf), while redis-benchmark keeps going. Every request must be
# answered, the new process serves once the old one is gone, the listener
# was passed and received, and no connection fell back to the kernel.
# Usage: haproxy.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need haproxy redis-server redis-cli redis-benchmark ss
need_ferry
need_sanitizer_ok "haproxy -v" "redis-cli -v"

port=$(free_port)
bport=$(free_port)
while [ "$bport" = "$port" ]; do bport=$(free_port); done
cat >"$work/haproxy.cfg" <<EOC
global
	maxconn 1024
	stats socket $work/admin.sock mode 600 level admin expose-fd listeners
defaults
	mode tcp
	timeout connect 5s
	timeout client 60s
	timeout server 60s
frontend fe
	bind 127.0.0.1:$port
	default_backend be
backend be
	server r1 127.0.0.1:$bport
EOC
bgf redis redis-server --port "$bport" --bind 127.0.0.1 --save "" --appendonly no \
	--protected-mode no --daemonize no
wait_listen "$bport"

# haproxy: the launcher daemonizes (-D) and writes the daemon's pid.
haproxy_start() { # NAME PIDFILE ARGS...
	_n=$1 _pidf=$2
	shift 2
	"$ferry_run" --transport "$transport" --stats "$work/stats-hap$_n-%p.json" \
		haproxy -D -f "$work/haproxy.cfg" -p "$_pidf" "$@" >"$work/hap$_n.log" 2>&1 ||
		fail "haproxy $_n did not start: $(tail -3 "$work/hap$_n.log")"
	pids="$pids $(cat "$_pidf")"
}
pings() { # COUNT
	_i=0
	while [ $_i -lt "$1" ]; do
		_i=$((_i + 1))
		got=$(timeout 20 "$ferry_run" --transport "$transport" \
			--stats "$work/stats-cli-%p.json" redis-cli -p "$port" ping) ||
			fail "ping $_i through haproxy failed"
		expect_eq "ping $_i" "$got" PONG
	done
}
haproxy_start 1 "$work/old.pid"
old=$(cat "$work/old.pid")
wait_listen "$port"
pings 3

timeout 60 "$ferry_run" --transport "$transport" --stats "$work/stats-cli-%p.json" \
	redis-benchmark -p "$port" -t set,get -n 50000 -c 10 -q >"$work/bench.log" 2>&1 &
bench=$!
sleep 0.5
haproxy_start 2 "$work/new.pid" -x "$work/admin.sock" -sf "$old"
wait "$bench" || fail "redis-benchmark failed across the reload: $(tail -3 "$work/bench.log")"
tr '\r' '\n' <"$work/bench.log" | grep -qi 'error' &&
	fail "redis-benchmark saw errors: $(tr '\r' '\n' <"$work/bench.log" | grep -i error | head -2)"
[ "$(tr '\r' '\n' <"$work/bench.log" | grep -c 'requests per second')" = 2 ] ||
	fail "redis-benchmark did not finish both tests: $(tail -3 "$work/bench.log")"
log "redis-benchmark SET and GET through haproxy across its reload: $(tr '\r' '\n' <"$work/bench.log" |
	grep 'requests per second' | cut -d, -f1 | tr '\n' ' ')"

# The old process may linger over idle connections: it goes, and the new
# one alone serves.
kill -TERM "$old" 2>/dev/null
wait_gone() { # PID
	_i=0
	while kill -0 "$1" 2>/dev/null && [ $_i -lt 100 ]; do sleep 0.1; _i=$((_i + 1)); done
	! kill -0 "$1" 2>/dev/null
}
wait_gone "$old" || fail "the old haproxy did not exit"
pings 3
kill -TERM "$(cat "$work/new.pid")"
wait_gone "$(cat "$work/new.pid")" || fail "the new haproxy did not exit"

check_transport
counter_ge "listeners passed by the old haproxy" "$(stat_sum sockets_passed hap1)" 1
counter_ge "listeners received by the new haproxy" "$(stat_sum sockets_received hap2)" 1
counter_ge "connections haproxy accepted" "$(stat_sum streams_accepted hap)" 10
counter_eq "haproxy's kernel accepts" "$(stat_sum kernel_accepts hap)" 0
counter_eq "client fallbacks" "$(stat_sum fallbacks cli)" 0
counter_eq "haproxy's fallbacks (to redis)" "$(stat_sum fallbacks hap)" 0
echo "PASS: haproxy over ferry ($transport)"
