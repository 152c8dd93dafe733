#!/bin/sh
# Only one side preloaded: a ferry client meeting a plain redis-server falls
# back to the kernel, a plain client meeting a ferry server is accepted by
# the kernel, both invisibly; and one ferry server serves both kinds at once.
# Usage: mixed.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need redis-server redis-cli redis-benchmark ss
need_ferry

roundtrip() { # how port: a SET and GET of a random value through redis-cli
	v=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
	r=$($1 redis-cli -p "$2" SET mixed "$v") || fail "SET through $1 failed"
	[ "$r" = OK ] || fail "SET through $1 answered '$r'"
	r=$($1 redis-cli -p "$2" GET mixed) || fail "GET through $1 failed"
	[ "$r" = "$v" ] || fail "GET through $1 returned '$r', not '$v'"
}
plain() { timeout 60 "$@"; }
ferried() { timeout 60 "$ferry_run" --transport "$transport" --stats "$work/stats-$tag-%p.json" "$@"; }

# --- ferry client -> plain server
plain_port=$(free_port)
bg plain-server redis-server --port "$plain_port" --bind 127.0.0.1 --save "" --appendonly no \
	--protected-mode no --daemonize no
wait_listen "$plain_port"
tag=fcli
roundtrip ferried "$plain_port"
timeout 120 "$ferry_run" --transport "$transport" --stats "$work/stats-fbench-%p.json" \
	redis-benchmark -p "$plain_port" -c 5 -n 2000 -t set,get -q >"$work/fbench.log" 2>&1 ||
	fail "preloaded redis-benchmark against a plain server failed: $(tail -2 "$work/fbench.log")"
log "ferry client -> plain server: works"
counter_ge "ferry client fallbacks" $(($(stat_sum fallbacks fcli) + $(stat_sum fallbacks fbench))) 7
counter_eq "ferry client streams_connected" $(($(stat_sum streams_connected fcli) + $(stat_sum streams_connected fbench))) 0

# --- plain client -> ferry server, and a ferry client alongside
ferry_port=$(free_port)
bgf fserver redis-server --port "$ferry_port" --bind 127.0.0.1 --save "" --appendonly no \
	--protected-mode no --daemonize no
fserver=$last_pid
wait_listen "$ferry_port"
roundtrip plain "$ferry_port"
timeout 120 redis-benchmark -p "$ferry_port" -c 5 -n 2000 -t set,get -q >"$work/pbench.log" 2>&1 ||
	fail "plain redis-benchmark against a ferry server failed: $(tail -2 "$work/pbench.log")"
log "plain client -> ferry server: works"
tag=fcli2
roundtrip ferried "$ferry_port"
log "ferry client -> the same ferry server: works"
kill -TERM "$fserver"
wait_exit "$fserver" 30 || fail "the ferry redis-server exited with an error"
check_transport fserver
counter_ge "ferry server kernel_accepts" "$(stat_sum kernel_accepts fserver)" 7
counter_ge "ferry server streams_accepted" "$(stat_sum streams_accepted fserver)" 2
counter_ge "ferry client streams_connected" "$(stat_sum streams_connected fcli2)" 2
# --- both ends preloaded, but the port is outside FERRY_PORTS, or ferry is disabled
port3=$(free_port)
bg fserver3 "$ferry_run" --transport "$transport" --ports 1-1023 \
	--stats "$work/stats-fserver3-%p.json" redis-server --port "$port3" --bind 127.0.0.1 \
	--save "" --appendonly no --protected-mode no --daemonize no
fserver3=$last_pid
wait_listen "$port3"
ported() { timeout 60 "$ferry_run" --transport "$transport" --ports 1-1023 --stats "$work/stats-fcli3-%p.json" "$@"; }
roundtrip ported "$port3"
log "port outside FERRY_PORTS: works"
disabled() { timeout 60 "$ferry_run" --transport "$transport" --disable --stats "$work/stats-off-%p.json" "$@"; }
roundtrip disabled "$port3"
log "FERRY_ENABLE=0 client: works"
kill -TERM "$fserver3"
wait_exit "$fserver3" 30 || fail "the port-filtered redis-server exited with an error"
counter_ge "client fallback_port_filtered" "$(stat_sum fallback_port_filtered fcli3)" 2
counter_eq "client streams_connected outside FERRY_PORTS" "$(stat_sum streams_connected fcli3)" 0
counter_eq "server streams_accepted outside FERRY_PORTS" "$(stat_sum streams_accepted fserver3)" 0
counter_eq "streams carried with ferry disabled" "$(stat_sum streams_connected off)" 0
echo "PASS: mixed plain and ferry ends ($transport)"
