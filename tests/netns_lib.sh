# Two hosts for the tests that need them (sourced): network namespaces
# $ns1 (address $a1) and $ns2 ($a2) joined by a veth pair with an ordinary
# 1500-byte MTU. Set $name first; netns_setup skips (77) without root or
# namespaces. $pids are killed and both namespaces deleted at exit.
set -u
builddir=${FERRY_TEST_BUILDDIR:-$(pwd)}
srcdir=${FERRY_TEST_SRCDIR:-$builddir/..}
ferry_run=$builddir/ferry-run
tag=$$
ns1=ferry-a-$tag ns2=ferry-b-$tag
# Documentation addresses (TEST-NET-1), reachable only inside these namespaces.
a1=192.0.2.1 a2=192.0.2.2
work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-netns.XXXXXX")
pids=

cleanup() {
	for p in $pids; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	ip netns del "$ns1" 2>/dev/null
	ip netns del "$ns2" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $name: $*"; for f in "$work"/*.out "$work"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done; exit 1; }
skip() { echo "SKIP: $name: $*"; exit 77; }
num() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" | head -1; }

# netns_bg NS HOW PROG...: PROG in NS in the background, plainly (HOW
# kernel) or under ferry (counters in stats-HOW-<pid>.json), its pid in
# $pids (the program's own: ip netns exec and ferry-run exec it).
netns_bg() {
	_ns=$1 _how=$2
	shift 2
	if [ "$_how" = ferry ]; then
		ip netns exec "$_ns" "$ferry_run" --transport udp --stats "$work/stats-$_how-%p.json" \
			"$@" &
	else
		ip netns exec "$_ns" "$@" &
	fi
	pids="$pids $!"
}

wait_line() { # FILE TEXT: until FILE says TEXT (10 s)
	for _i in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
	fail "$1 never said $2"
}

netns_setup() {
	[ "$(id -u)" -eq 0 ] || skip "needs root for ip netns"
	command -v ip >/dev/null || skip "iproute2 is not installed"
	ip netns add "$ns1" 2>/dev/null || skip "ip netns add is not permitted here"
	ip netns add "$ns2" || fail "ip netns add $ns2"
	ip link add "fv1-$tag" type veth peer name "fv2-$tag" || skip "veth is not available"
	ip link set "fv1-$tag" netns "$ns1" && ip link set "fv2-$tag" netns "$ns2" || fail "moving veth"
	ip -n "$ns1" addr add $a1/24 dev "fv1-$tag" && ip -n "$ns2" addr add $a2/24 dev "fv2-$tag" ||
		fail "addresses"
	for ns in "$ns1" "$ns2"; do
		ip -n "$ns" link set lo up
	done
	ip -n "$ns1" link set "fv1-$tag" up mtu 1500 && ip -n "$ns2" link set "fv2-$tag" up mtu 1500 ||
		fail "link up"
}
