#!/bin/sh
# Trust across two hosts, kernel and ferry side by side: the same clients
# and servers run plainly, then both ends under ferry-run, and must give
# the same answers. A client bound to 127.0.0.1 cannot connect to the other
# host; one bound to the wildcard is seen with its real address on both
# ends; a listener bound to the server's 127.0.0.1 is out of the other
# host's reach; redis in its default protected mode serves a client of its
# own host and denies one of the other. Then a hostile ferry peer
# (forge_open) claims addresses its connect never named: an OPEN for the
# server's loopback listener is refused, and a claimed source address is
# not believed. Needs root for `ip netns`; skips (77) without it.
name=netns_trust
. "$(dirname "$0")/netns_lib.sh"
probe=$srcdir/tests/integration/addrprobe.py
forge=$builddir/tests/integration/forge_open
command -v python3 >/dev/null || skip "python3 is not installed"
command -v redis-server >/dev/null || skip "redis-server is not installed"
[ -x "$forge" ] || fail "$forge is not built"
[ -x "$ferry_run" ] || fail "$ferry_run is not built"
netns_setup

# on NS HOW PROG...: PROG in NS, plainly (kernel) or under ferry.
on() {
	_ns=$1 _how=$2
	shift 2
	if [ "$_how" = ferry ]; then
		ip netns exec "$_ns" "$ferry_run" --transport udp --stats "$work/stats-$_how-%p.json" "$@"
	else
		ip netns exec "$_ns" "$@"
	fi
}

port=7720
for how in kernel ferry; do
	port=$((port + 10))
	P=$port Q=$((port + 1)) R=$((port + 2))
	out=$work/$how.txt
	: >"$out"
	netns_bg "$ns1" $how python3 "$probe" server 0.0.0.0:$P 127.0.0.1:$Q >"$work/srv-$how.out" 2>&1
	netns_bg "$ns1" $how redis-server --port $R --save '' --appendonly no >"$work/redis-$how.out" 2>&1
	wait_line "$work/srv-$how.out" listening
	wait_line "$work/redis-$how.out" "Ready to accept"
	{
		echo "# client bound to 127.0.0.1, to the other host"
		on "$ns2" $how python3 "$probe" client 127.0.0.1 $a1 $P
		echo "# client bound to the wildcard"
		on "$ns2" $how python3 "$probe" client 0.0.0.0 $a1 $P
		echo "# the other host's 127.0.0.1"
		on "$ns2" $how python3 "$probe" client - 127.0.0.1 $Q
		echo "# redis, protected mode: a client of its host bound to the wildcard"
		on "$ns1" $how python3 "$probe" redis 0.0.0.0 127.0.0.1 $R
		echo "# redis, protected mode: a client of the other host"
		on "$ns2" $how python3 "$probe" redis - $a1 $R
	} >>"$out" 2>&1
done
cat "$work/kernel.txt"
diff -u "$work/kernel.txt" "$work/ferry.txt" || fail "ferry's answers differ from the kernel's (above)"
grep -q "connect EINVAL" "$work/kernel.txt" || fail "the kernel did not refuse a loopback source"
grep -q "accepted $a1 from $a2" "$work/kernel.txt" || fail "the wildcard-bound client was not seen as $a2"

# The hostile peer, against the ferry server (ports P, Q of the ferry run).
hostile() { ip netns exec "$ns2" "$forge" "$@" 2>&1; }
got=$(hostile $a1 $P 127.0.0.1 $Q $a2 40000)
echo "forged OPEN for the server's 127.0.0.1:$Q: $got"
[ "$got" = "open ECONNREFUSED" ] || fail "an OPEN for a loopback listener from another host: $got"
got=$(hostile $a1 $P $a1 $P 127.0.0.1 40001)
echo "forged OPEN claiming source 127.0.0.1: $got"
[ "$got" = "open 0" ] || fail "an OPEN for the wildcard listener was not taken: $got"
wait_line "$work/srv-ferry.out" "accepted $a1 from $a2"
grep "from 127.0.0.1" "$work/srv-ferry.out" && fail "the server believed a claimed source address"
# The counters are written at exit: stop the servers.
for p in $pids; do kill -TERM "$p" 2>/dev/null; done
wait 2>/dev/null
pids=
refused=0 accepted=0
for f in "$work"/stats-ferry-*.json; do
	n=$(num opens_unreachable <"$f")
	refused=$((refused + ${n:-0}))
	n=$(num streams_accepted <"$f")
	accepted=$((accepted + ${n:-0}))
done
echo "ferry servers: streams_accepted=$accepted opens_unreachable=$refused"
[ "$refused" -ge 1 ] || fail "the refused OPEN was not counted (opens_unreachable=$refused)"
[ "$accepted" -ge 4 ] || fail "ferry did not carry the connections (streams_accepted=$accepted)"
echo "PASS: $name"
