#!/bin/sh
# scripts/demo.sh: ferry's main job in one command. Builds ferry if needed,
# runs an unmodified redis-server and redis-benchmark over kernel TCP, then
# the same two programs with libferry preloaded, and prints both figures next
# to the path the traffic took, as the FERRY_STATS counters tell it.
#
# Usage: scripts/demo.sh [-B BUILDDIR] [-t udp|softib|auto] [-n REQUESTS] [-c CLIENTS]
#   BUILDDIR defaults to build/demo under the source tree (made and built if
#   it has no libferry.so yet).

set -u
top=$(cd "$(dirname "$0")/.." && pwd)
builddir=${FERRY_BUILDDIR:-$top/build/demo}
transport=${FERRY_TRANSPORT:-udp}
n=20000
clients=50
while [ $# -gt 0 ]; do
	case $1 in
	-B) builddir=$2; shift 2 ;;
	-t) transport=$2; shift 2 ;;
	-n) n=$2; shift 2 ;;
	-c) clients=$2; shift 2 ;;
	-h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "demo.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
unset LD_PRELOAD FERRY_TRANSPORT FERRY_STATS FERRY_ENABLE

for b in redis-server redis-benchmark ss; do
	command -v $b >/dev/null || { echo "demo.sh: $b is not installed (scripts/deps.sh installs it)" >&2; exit 2; }
done

# --- build if needed
if [ ! -x "$builddir/ferry-run" ] || [ ! -f "$builddir/.libs/libferry.so" ]; then
	echo "building ferry in $builddir ..."
	[ -x "$top/configure" ] || (cd "$top" && autoreconf -i) || exit 1
	mkdir -p "$builddir"
	(cd "$builddir" && { [ -f Makefile ] || "$top/configure" -q; } &&
		make -j"$(nproc 2>/dev/null || echo 2)") >"$builddir/demo-build.log" 2>&1 ||
		{ tail -20 "$builddir/demo-build.log"; echo "demo.sh: the build failed (see $builddir/demo-build.log)" >&2; exit 1; }
fi
ferry_run=$builddir/ferry-run

work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-demo.XXXXXX")
server=
cleanup() {
	[ -n "$server" ] && kill -TERM "$server" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() {
	while :; do
		p=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 30000))
		ss -Htuan | awk '{print $5}' | grep -q ":$p\$" || { echo $p; return; }
	done
}

# run MODE: one redis-server and one redis-benchmark; prints "set_rps get_rps get_p50".
run() {
	mode=$1
	port=$(free_port)
	set -- redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
		--protected-mode no --daemonize no
	[ "$mode" = ferry ] && set -- "$ferry_run" --transport "$transport" \
		--stats "$work/server-%p.json" "$@"
	"$@" >"$work/server-$mode.log" 2>&1 &
	server=$!
	i=0
	until ss -Hltn "sport = :$port" | grep -q LISTEN; do
		i=$((i + 1))
		[ $i -lt 200 ] || { echo "redis-server did not start: $(tail -2 "$work/server-$mode.log")" >&2; exit 1; }
		sleep 0.05
	done
	set -- redis-benchmark -p "$port" -c "$clients" -n "$n" -t set,get -r 100000 --csv
	[ "$mode" = ferry ] && set -- "$ferry_run" --transport "$transport" \
		--stats "$work/client-%p.json" "$@"
	"$@" >"$work/bench-$mode.csv" 2>"$work/bench-$mode.err" ||
		echo "redis-benchmark failed over $mode: $(tail -2 "$work/bench-$mode.err")" >&2
	kill -TERM "$server"
	wait "$server"
	server=
	tr -d '"' <"$work/bench-$mode.csv" | awk -F, '
		$1 == "SET" {s = $2} $1 == "GET" {g = $2; gp = $5}
		END {print (s ? s : "-"), (g ? g : "-"), (gp ? gp : "-")}'
}

stat() { # side key
	cat "$work"/$1-*.json 2>/dev/null | grep -o "\"$2\":[0-9]*" | cut -d: -f2 |
		awk '{s += $1} END {print s + 0}'
}
stat_str() { # side key
	cat "$work"/$1-*.json 2>/dev/null | grep -o "\"$2\":\"[^\"]*\"" | cut -d'"' -f4 | head -1
}

echo "redis-benchmark -c $clients -n $n -t set,get, kernel TCP then ferry ($transport) ..."
set -- $(run kernel)
k_set=$1 k_get=$2 k_p50=$3
set -- $(run ferry)
f_set=$1 f_get=$2 f_p50=$3

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }
echo
printf '%-22s %14s %14s %8s\n' "" "kernel TCP" "ferry" "ratio"
printf '%-22s %14s %14s %8s\n' "SET requests/s" "$k_set" "$f_set" "$(ratio "$f_set" "$k_set")"
printf '%-22s %14s %14s %8s\n' "GET requests/s" "$k_get" "$f_get" "$(ratio "$f_get" "$k_get")"
printf '%-22s %14s %14s %8s\n' "GET p50 latency (ms)" "$k_p50" "$f_p50" "$(ratio "$f_p50" "$k_p50")"
echo
echo "Path taken over ferry (FERRY_STATS counters):"
printf '%-22s %14s %18s\n' "" "redis-server" "redis-benchmark"
printf '%-22s %14s %18s\n' "transport" "$(stat_str server transport)" "$(stat_str client transport)"
printf '%-22s %14s %18s\n' "ferry streams" "$(stat server streams_accepted) accepted" "$(stat client streams_connected) connected"
printf '%-22s %14s %18s\n' "fallbacks to kernel" "$(stat server fallbacks)" "$(stat client fallbacks)"
printf '%-22s %14s %18s\n' "kernel accepts" "$(stat server kernel_accepts)" "-"
printf '%-22s %14s %18s\n' "bytes sent" "$(stat server bytes_tx)" "$(stat client bytes_tx)"
printf '%-22s %14s %18s\n' "bytes received" "$(stat server bytes_rx)" "$(stat client bytes_rx)"
printf '%-22s %14s %18s\n' "sessions" "$(stat server sessions)" "$(stat client sessions)"
printf '%-22s %14s %18s\n' "retransmits" "$(stat server retransmits)" "$(stat client retransmits)"
echo
connected=$(stat client streams_connected)
fell=$(($(stat client fallbacks) + $(stat server kernel_accepts)))
if [ "$connected" -ge "$clients" ] && [ "$fell" -eq 0 ]; then
	echo "All $connected benchmark connections rode ferry ($transport); none went to the kernel."
else
	echo "WARNING: ferry carried $connected connections and $fell went to the kernel:" \
		"the ferry figures above are not (only) ferry's. Rerun with FERRY_LOG=info to see why."
	exit 1
fi
