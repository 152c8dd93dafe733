#!/bin/sh
# ferry's own UDP sockets (doc/ports.md): a program whose sockets are all
# loopback binds none of them beyond loopback, client or server, over IPv4
# and IPv6; once it listens on the wildcard (redis's CONFIG SET bind, at run
# time) its control and datapath sockets move there at the same ports, and
# the connections it already served go on. Usage: ports.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need redis-server redis-cli ss
need_ferry
counting || skip "only ferry's own sockets are checked here"
hold=$builddir/tests/integration/connhold
[ -x "$hold" ] || fail "$hold not built"

# Local addresses of pid's UDP sockets, one a line; unconnected only: a
# connected one (a datapath peer's sending socket) hears only its peer.
udp_of() { ss -Huanp 2>/dev/null | grep "pid=$1," | awk '{print $4}' | sort; }
unconnected_of() { ss -Huanp 2>/dev/null | grep "^UNCONN.*pid=$1," | awk '{print $4}' | sort; }
beyond_loopback() { udp_of "$1" | grep -v '^127\.\|^\[::1\]:'; }

port=$(free_port)
bgf server redis-server --port "$port" --bind "127.0.0.1 ::1" --save "" --appendonly no \
	--protected-mode no --daemonize no
server=$last_pid
wait_listen "$port"
bgf hold "$hold" "$port" 4
holder=$last_pid
wait_line hold ready "$holder"
r=$(timeout 30 "$ferry_run" --transport "$transport" --stats "$work/stats-cli-%p.json" \
	redis-cli -h ::1 -p "$port" PING) || fail "redis-cli over ::1 failed"
expect_eq "PING over ::1" "$r" PONG

unconnected_of "$server" >"$work/server-udp-before.txt"
log "server's UDP sockets: $(tr '\n' ' ' <"$work/server-udp-before.txt")"
expect_ge "server's UDP sockets" "$(wc -l <"$work/server-udp-before.txt")" 3
out=$(beyond_loopback "$server")
[ -z "$out" ] || fail "a loopback-only server binds beyond loopback: $out"
out=$(beyond_loopback "$holder")
[ -z "$out" ] || fail "a loopback-only client binds beyond loopback: $out"
log "loopback only: nothing of server or client bound beyond loopback"

r=$(timeout 30 "$ferry_run" --transport "$transport" --stats "$work/stats-cli-%p.json" \
	redis-cli -p "$port" CONFIG SET bind "* -::*") || fail "CONFIG SET bind failed"
expect_eq "CONFIG SET bind" "$r" OK
sleep 1 # the held connections keep going meanwhile
kill -0 "$holder" 2>/dev/null || fail "connhold died: $(tail -2 "$work/hold.log")"
ended=$(grep -c ' end ' "$work/hold.log")
expect_eq "held connections that ended across the move" "$ended" 0
r=$(timeout 30 "$ferry_run" --transport "$transport" --stats "$work/stats-cli-%p.json" \
	redis-cli -p "$port" PING) || fail "redis-cli after the move failed"
expect_eq "PING after the move" "$r" PONG

# The same ports as before, apart from the listener's own, all now wildcard.
ports_of() { sed 's/.*://' "$1" | grep -vx "$port" | sort -n | tr '\n' ' '; }
unconnected_of "$server" >"$work/server-udp-after.txt"
log "server's UDP sockets now: $(tr '\n' ' ' <"$work/server-udp-after.txt")"
expect_eq "ferry's ports (the listener's aside)" "$(ports_of "$work/server-udp-after.txt")" \
	"$(ports_of "$work/server-udp-before.txt")"
narrow=$(grep -v "^\*:\|^0\.0\.0\.0:\|^\[::\]:" "$work/server-udp-after.txt")
[ -z "$narrow" ] || fail "sockets left on loopback after the move: $narrow"

kill -TERM "$holder"
kill -TERM "$server"
wait_exit "$server" 30 || fail "redis-server exited with an error"
check_transport server
counter_eq "fallbacks" $(($(stat_sum fallbacks) + $(stat_sum kernel_accepts))) 0
echo "PASS: ports ($transport)"
