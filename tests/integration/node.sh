#!/bin/sh
# node, both ends preloaded, in two shapes node programs take:
# - a cluster of two workers behind one listener: the primary accepts and
#   passes each connection to a worker over the cluster's channel
#   (SCM_RIGHTS). Twenty HTTP/1.0 requests (socat) each get their 1 KB from
#   a worker, which then closes, both workers serve, and every connection
#   was taken over by the worker it was passed to, none falling back;
#   clients that close before a worker has their connection (a health
#   check, a fire-and-forget request) leave it to be taken over, not reset.
# - a server that closes each connection after its answer: libuv closes with
#   syscall(SYS_close), not close(), and the client must read the end of
#   the stream (before close.h, it waited for it forever).
# Usage: node.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need node socat
need_ferry
need_sanitizer_ok "node -e 0" "socat -V"
servers=$srcdir/tests/integration/node_servers.js

port=$(free_port)
# At info, where a connection read as reset when its peer had gone is told.
bgf cluster env FERRY_LOG=info node "$servers" cluster "$port"
cluster=$last_pid
wait_line cluster listening "$cluster"
n=0
workers=
while [ $n -lt 20 ]; do
	n=$((n + 1))
	# HTTP/1.0: the worker closes after its answer, and socat reads to
	# the end; the timeout only bounds a failure.
	printf 'GET / HTTP/1.0\r\n\r\n' | timeout 30 "$ferry_run" --transport "$transport" \
		--stats "$work/stats-client-%p.json" socat -t 60 - TCP:127.0.0.1:"$port" \
		>"$work/answer" || fail "request $n: socat failed or hung (exit $?)"
	tr -d '\r' <"$work/answer" | sed '1,/^$/d' >"$work/body"
	[ "$(tr -d x <"$work/body" | wc -c)" = 0 ] && [ "$(wc -c <"$work/body")" = 1024 ] ||
		fail "request $n: $(wc -c <"$work/body") bytes of body, or not all 'x'"
	w=$(tr -d '\r' <"$work/answer" | sed -n 's/^X-Worker: //p')
	case " $workers " in *" $w "*) ;; *) workers="$workers $w" ;; esac
done
log "20 requests, 1 KB each, served by workers$workers"
[ "$(echo $workers | wc -w)" -ge 2 ] || fail "one worker served every request"
# Clients that close before a worker has the connection: health checks that
# connect and close, and fire-and-forget senders. On the kernel's socket the
# worker reads what came and EOF; ferry's must too (it read a reset, and
# lost the bytes, when the peer's stream had closed before the move).
n=0
while [ $n -lt 5 ]; do
	n=$((n + 1))
	timeout 30 "$ferry_run" --transport "$transport" --stats "$work/stats-client-%p.json" \
		socat -u /dev/null TCP:127.0.0.1:"$port" || fail "health check $n failed"
	printf 'GET / HTTP/1.0\r\n\r\n' | timeout 30 "$ferry_run" --transport "$transport" \
		--stats "$work/stats-client-%p.json" socat -u - TCP:127.0.0.1:"$port" ||
		fail "fire-and-forget request $n failed"
done
printf 'GET / HTTP/1.0\r\n\r\n' | timeout 30 "$ferry_run" --transport "$transport" \
	--stats "$work/stats-client-%p.json" socat -t 60 - TCP:127.0.0.1:"$port" >"$work/answer" ||
	fail "the request after the early closes failed"
[ "$(tr -d '\r' <"$work/answer" | sed '1,/^$/d' | wc -c)" = 1024 ] ||
	fail "the request after the early closes got no 1 KB body"
sleep 0.5
if grep -q 'cannot be taken over' "$work/cluster.log"; then
	grep 'cannot be taken over' "$work/cluster.log" | head -3
	fail "a worker could not take over a connection its client had closed"
fi
log "5 health checks and 5 fire-and-forget requests taken over without a reset"
kill -TERM "$cluster"
wait_exit "$cluster" 20 || fail "the cluster exited with an error"

port=$(free_port)
bgf closer node "$servers" closer "$port"
closer=$last_pid
wait_line closer listening "$closer"
n=0
while [ $n -lt 5 ]; do
	n=$((n + 1))
	# socat waits up to -t for the server's end once its input is sent;
	# the timeout around it only bounds a failure.
	got=$(echo "hello $n" | timeout 30 "$ferry_run" --transport "$transport" \
		--stats "$work/stats-client-%p.json" socat -t 60 - TCP:127.0.0.1:"$port") ||
		fail "client $n never read the end of the stream the server closed"
	expect_eq "client $n" "$got" "bye:hello $n"
done
kill -TERM "$closer"
wait_exit "$closer" 20 || fail "the closing server exited with an error"

check_transport
counter_eq "client fallbacks" "$(stat_sum fallbacks client)" 0
counter_ge "clients' streams_connected" "$(stat_sum streams_connected client)" 25
counter_ge "cluster's sockets_passed" "$(stat_sum sockets_passed cluster)" 20
counter_ge "cluster's sockets_received" "$(stat_sum sockets_received cluster)" 20
counter_ge "closer's streams_accepted" "$(stat_sum streams_accepted closer)" 5
echo "PASS: node over ferry ($transport)"
