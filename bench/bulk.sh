#!/bin/sh
# bench/bulk.sh: bulk transfer, kernel TCP against ferry, in one go.
#
# iperf3 (one TCP stream) with both ends on the kernel, then with both ends
# under ferry-run, on each path:
#   loopback   same host, udp (packets up to 64 KB)
#   veth       two hosts: network namespaces joined by a veth pair at MTU
#              1500, udp (root only; skipped otherwise)
#   softib     same host, softib at FERRY_MTU=4096 (a real HCA's packets)
# and ferry-bench's 1 MB bandwidth test on the same path, for its rate and
# the ns per packet it took (its ns_per_pkt: the measured time over the
# packets the client sent in it, warm-up and drain left out). A ferry
# figure whose counters show no stream over ferry is marked FALLBACK.
#
# Usage: bench/bulk.sh [-B BUILDDIR] [-t SECONDS] [-p "loopback veth softib"]
#   BUILDDIR   a configured and built tree (default: the current directory)
#   -t         seconds per figure (default 3)
#   -p         paths to measure (default: all three)
# Extra FERRY_* variables in the environment (FERRY_UDP_GSO=0...) apply to
# every ferry figure. Figures are noisy on a shared machine: compare the
# ratios of one run.

set -u
builddir=$(pwd)
secs=3
paths="loopback veth softib"
while [ $# -gt 0 ]; do
	case $1 in
	-B) builddir=$2; shift 2 ;;
	-t) secs=$2; shift 2 ;;
	-p) paths=$2; shift 2 ;;
	-h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bulk.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
bench_build "$builddir"
bench=$builddir/bench/ferry-bench
[ -x "$bench" ] || { echo "bulk.sh: no bench/ferry-bench in $builddir: build first (make)" >&2; exit 2; }
bench_need iperf3

# The two hosts, their cleanup at exit, $work and $pids: the tests' netns_lib.sh.
name=bulk
FERRY_TEST_BUILDDIR=$builddir . "$(dirname "$0")/../tests/netns_lib.sh"

port=$((20000 + tag % 20000))
# iperf3 HOW SERVER-PREFIX CLIENT-PREFIX ADDR [FERRY-ENV...]: Gbit/s the
# receiver saw, "FALLBACK" when ferry did not carry it, "-" on failure.
iperf() {
	how=$1 sp=$2 cp=$3 addr=$4
	shift 4
	port=$((port + 1))
	rm -f "$work"/stats-*.json
	run=
	[ "$how" = ferry ] && run="env $* $ferry_run --stats $work/stats-%p.json"
	# shellcheck disable=SC2086 # the prefixes are words
	$sp $run iperf3 -s -1 -B "$addr" -p $port >"$work/server.out" 2>&1 &
	pids="$pids $!"
	server=$!
	for _i in $(seq 50); do grep -q 'listening' "$work/server.out" 2>/dev/null && break; sleep 0.1; done
	# shellcheck disable=SC2086
	$cp $run iperf3 -c "$addr" -p $port -t "$secs" -f g >"$work/client.out" 2>&1
	wait "$server" 2>/dev/null
	g=$(awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i + 1) == "Gbits/sec") print $i }' \
		"$work/client.out" | tail -1)
	[ -n "$g" ] || { echo "-"; return; }
	if [ "$how" = ferry ]; then
		carried=0
		for f in "$work"/stats-*.json; do
			[ -f "$f" ] || continue
			c=$(num streams_connected <"$f")
			carried=$((carried + ${c:-0}))
		done
		[ "$carried" -gt 0 ] || { echo "FALLBACK"; return; }
	fi
	echo "$g"
}

# ferry-bench's 1 MB bandwidth on TRANSPORT: "Gbit/s ns/packet".
fbench() {
	transport=$1 sp=$2 cp=$3 addr=$4
	shift 4
	if [ -z "$sp" ]; then
		out=$(env "$@" "$bench" --transport "$transport" --test bandwidth --size 1048576 \
			--seconds "$secs" 2>/dev/null)
	else
		port=$((port + 1))
		# shellcheck disable=SC2086
		$sp env "$@" "$bench" --transport "$transport" --test bandwidth --server "$addr:$port" \
			--seconds $((secs + 10)) >"$work/fb-server.out" 2>&1 &
		pids="$pids $!"
		for _i in $(seq 50); do grep -q '"port"' "$work/fb-server.out" 2>/dev/null && break; sleep 0.1; done
		# shellcheck disable=SC2086
		out=$($cp env "$@" "$bench" --transport "$transport" --test bandwidth --size 1048576 \
			--seconds "$secs" --connect "$addr:$port" 2>/dev/null)
	fi
	g=$(echo "$out" | num gbps)
	p=$(echo "$out" | num ns_per_pkt)
	if [ -n "$g" ] && [ -n "$p" ]; then
		echo "$g $p"
	else
		echo "- -"
	fi
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }

printf '%-34s %10s %10s %7s %14s %8s\n' "path" "kernel" "ferry" "ratio" "ferry-bench" "ns/pkt"
row() { # label transport server-prefix client-prefix addr env...
	label=$1 transport=$2 sp=$3 cp=$4 addr=$5
	shift 5
	k=$(iperf kernel "$sp" "$cp" "$addr")
	f=$(iperf ferry "$sp" "$cp" "$addr" FERRY_TRANSPORT="$transport" "$@")
	set -- $(fbench "$transport" "$sp" "$cp" "$addr" "$@")
	printf '%-34s %10s %10s %7s %14s %8s\n' "$label" "$k" "$f" "$(ratio "$f" "$k")" "$1" "$2"
}
for path in $paths; do
	case $path in
	loopback) row "loopback, udp (Gbit/s)" udp "" "" 127.0.0.1 ;;
	veth)
		if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null; then
			netns_setup
			row "veth MTU 1500, udp (Gbit/s)" udp "ip netns exec $ns1" "ip netns exec $ns2" $a1
		else
			echo "veth: skipped (needs root and ip netns)"
		fi ;;
	softib) row "loopback, softib 4 KB (Gbit/s)" softib "" "" 127.0.0.1 FERRY_MTU=4096 ;;
	*) echo "bulk.sh: unknown path $path" >&2; exit 2 ;;
	esac
done
