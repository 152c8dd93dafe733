#!/bin/sh
# Two hosts: network namespaces joined by a veth pair with an ordinary
# 1500-byte MTU. ferry-bench runs server and client on different hosts, so
# sessions are set up across a real interface, and packets must follow that
# interface's path MTU (on loopback they are 64 KB); then redis-server and
# redis-cli, both preloaded, talk across it and the counters prove ferry
# carried the connection. Needs root for `ip netns`; skips (77) without it.
name=netns_two_hosts
. "$(dirname "$0")/netns_lib.sh"
bench=$builddir/bench/ferry-bench
[ -x "$bench" ] || fail "$bench is not built"
netns_setup

# 1. ferry-bench across the veth: server on host a, client on host b.
ip netns exec "$ns1" "$bench" --transport udp --test bandwidth --server $a1:7711 --seconds 30 \
	>"$work/server.out" 2>"$work/server.err" &
pids="$pids $!"
for i in $(seq 50); do grep -q '"port"' "$work/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q '"port":7711' "$work/server.out" || fail "ferry-bench server did not start"
out=$(ip netns exec "$ns2" "$bench" --transport udp --test bandwidth --size 1048576 --seconds 1 \
	--connect $a1:7711 2>"$work/client.err") || fail "ferry-bench client failed: $out"
echo "$out" >"$work/client.out"
requests=$(echo "$out" | num requests_tx)
pkts=$(echo "$out" | num pkts_tx)
bytes=$(echo "$out" | num bytes_tx)
errors=$(echo "$out" | num errors)
[ "${errors:-1}" = 0 ] || fail "requests failed across the veth: $out"
[ "${requests:-0}" -gt 0 ] || fail "no request completed: $out"
per=$((bytes / pkts))
echo "1 MB requests across a 1500-byte veth: $requests requests, $per payload bytes per packet"
# The path allows 1500 - 28 (IPv4 + UDP) - 32 (ferry header) = 1440 bytes of
# payload; over loopback the same run carries about 64 KB a packet.
[ "$per" -le 1440 ] || fail "packets do not follow the path MTU: $per payload bytes per packet"

# 2. redis across the veth, both ends preloaded.
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null && [ -x "$ferry_run" ]; then
	ip netns exec "$ns1" "$ferry_run" --transport udp --stats="$work/server.%p.json" \
		redis-server --bind $a1 --port 7712 --save '' --appendonly no --protected-mode no \
		>"$work/redis.out" 2>"$work/redis.err" &
	pids="$pids $!"
	for i in $(seq 50); do
		ip netns exec "$ns2" redis-cli -h $a1 -p 7712 ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	head -c 300000 /dev/urandom | base64 -w0 >"$work/value"
	ip netns exec "$ns2" "$ferry_run" --transport udp --stats="$work/client.%p.json" \
		redis-cli -h $a1 -p 7712 -x set big <"$work/value" >/dev/null || fail "redis SET across the veth"
	ip netns exec "$ns2" "$ferry_run" --transport udp --stats="$work/client.%p.json" \
		redis-cli -h $a1 -p 7712 --raw get big >"$work/got" || fail "redis GET across the veth"
	# redis-cli -x keeps stdin's bytes; --raw adds one newline.
	printf '\n' >>"$work/value"
	cmp -s "$work/value" "$work/got" || fail "GET returned other bytes than SET stored"
	connected=0
	for f in "$work"/client.*.json; do
		n=$(num streams_connected <"$f")
		connected=$((connected + ${n:-0}))
	done
	echo "redis across the veth: 400 KB value verified, client streams over ferry: $connected"
	[ "$connected" -ge 2 ] || fail "redis-cli did not go over ferry (streams_connected=$connected)"

	# 3. The server's process dies and its host stays up: the client, blocked
	# in BLPOP on the other host, learns it from the network (ICMP port
	# unreachable answers its next ping to the dead process's control
	# socket), not from the failure timeout, ten minutes here.
	ip netns exec "$ns1" env FERRY_FAILURE_TIMEOUT_MS=600000 "$ferry_run" --transport udp \
		--stats="$work/server3.%p.json" redis-server --bind $a1 --port 7713 --save '' \
		--appendonly no --protected-mode no >"$work/redis3.out" 2>"$work/redis3.err" &
	server3=$!
	pids="$pids $server3"
	for i in $(seq 50); do
		ip netns exec "$ns2" redis-cli -h $a1 -p 7713 ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	ip netns exec "$ns2" env FERRY_FAILURE_TIMEOUT_MS=600000 "$ferry_run" --transport udp \
		--stats="$work/blocked.%p.json" redis-cli -h $a1 -p 7713 BLPOP never 0 \
		>"$work/blocked.out" 2>&1 &
	blocked=$!
	pids="$pids $blocked"
	sleep 1 # blocked in BLPOP, and the peers have pinged each other
	kill -0 $blocked 2>/dev/null || fail "redis-cli BLPOP did not block: $(cat "$work/blocked.out")"
	t0=$(date +%s%N)
	kill -KILL $server3
	# A bound only a missing notice exceeds: the timeout is 600 s.
	for i in $(seq 300); do kill -0 $blocked 2>/dev/null || break; sleep 0.05; done
	kill -0 $blocked 2>/dev/null && fail "the client did not learn of the server's death within 15 s"
	ms=$((($(date +%s%N) - t0) / 1000000))
	wait $blocked 2>/dev/null
	dead=$(num dead_peers <"$(ls "$work"/blocked.*.json | head -1)")
	echo "server killed on the other host: the blocked client learned it after <= $ms ms (dead_peers=$dead)"
	[ "${dead:-0}" -ge 1 ] || fail "the client ended without declaring the server dead: $(cat "$work/blocked.out")"
else
	echo "redis part not run: redis-server, redis-cli or ferry-run missing"
fi
echo "PASS: netns_two_hosts"
