#!/bin/sh
# SO_KEEPALIVE and TCP_USER_TIMEOUT across two hosts, kernel and ferry side
# by side: a connection whose wire is cut (the server's link goes down, so
# nothing answers and no ICMP comes) ends with ETIMEDOUT after the socket's
# own keepalive or user timeout, not ferry's failure timeout (ten minutes
# here, so only the socket's timeout can end the wait). Needs root for
# `ip netns`; skips (77) without it.
name=netns_keepalive
. "$(dirname "$0")/netns_lib.sh"
probe=$srcdir/tests/integration/addrprobe.py
command -v python3 >/dev/null || skip "python3 is not installed"
[ -x "$ferry_run" ] || fail "$ferry_run is not built"
netns_setup
export FERRY_FAILURE_TIMEOUT_MS=600000

port=7760
for how in kernel ferry; do
	for mode in keepalive usertimeout; do
		port=$((port + 1))
		out=$work/$mode-$how.out
		netns_bg "$ns1" $how python3 "$probe" hold 0.0.0.0:$port >"$work/hold-$how-$port.out" 2>&1
		wait_line "$work/hold-$how-$port.out" listening
		netns_bg "$ns2" $how python3 "$probe" $mode $a1 $port "$work/cut-$port" >"$out" 2>&1
		client=$!
		wait_line "$out" ready
		sleep 0.5 # the server's accept and the first words are done
		ip -n "$ns1" link set "fv1-$tag" down || fail "link down"
		touch "$work/cut-$port"
		# A bound only a broken timeout exceeds: the failure timeout is 600 s.
		for i in $(seq 200); do kill -0 $client 2>/dev/null || break; sleep 0.1; done
		kill -0 $client 2>/dev/null && fail "$how $mode: the connection outlived its timeout by far"
		ip -n "$ns1" link set "fv1-$tag" up || fail "link up"
		# The neighbours the cut made unreachable are forgotten.
		ip -n "$ns1" neigh flush all 2>/dev/null
		ip -n "$ns2" neigh flush all 2>/dev/null
		sleep 0.5
		echo "$how $mode: $(grep recv "$out")"
	done
done
for mode in keepalive usertimeout; do
	k=$(grep recv "$work/$mode-kernel.out") f=$(grep recv "$work/$mode-ferry.out")
	[ "$k" = "recv ETIMEDOUT" ] || fail "kernel $mode: $k (the test expects ETIMEDOUT)"
	[ "$f" = "$k" ] || fail "ferry $mode: $f, kernel: $k"
done
echo "PASS: $name"
