#!/bin/sh
# softib against this machine's physical limit, in one run:
#   ferry 32 B latency p50 / bare shared-memory ping-pong p50   (target <= 10)
#   ferry small-RPC rate with batching                          (target >= 2,000,000/s)
#   ferry 1 MB bandwidth / single-threaded memcpy of 1 MB        (target >= 0.5)
#   (and, for comparison, with two 1 MB requests in flight)
# usage: scripts/bench_softib.sh BUILD_DIR [SECONDS_PER_RUN]
# BUILD_DIR: a configured build tree with bench/ferry-bench and
# bench/shm_pingpong built. Raw JSON lines first, then the table.
set -e
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [SECONDS_PER_RUN]" >&2; exit 2; }
build=$(cd "$1" && pwd)
secs=${2:-2}
fb="$build/bench/ferry-bench"
pp="$build/bench/shm_pingpong"
for b in "$fb" "$pp"; do
	[ -x "$b" ] || { echo "$b is missing: make bench/ferry-bench bench/shm_pingpong in $build" >&2; exit 1; }
done
# A fabric of its own, so a crashed earlier run cannot interfere.
FERRY_SOFTIB_FABRIC=bench-$$
export FERRY_SOFTIB_FABRIC

key() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
run() { # label, ferry-bench arguments...
	label=$1; shift
	out=$("$fb" --transport softib --seconds "$secs" "$@") || { echo "$label: ferry-bench failed" >&2; out=; }
	echo "$out"
	eval "$label=\$out"
}

bare=$("$pp") || bare=
echo "$bare"
run lat --test latency --size 32
run rate1 --test rate --batch 1
run rate8 --test rate --batch 8
run rate32 --test rate --batch 32
run bw --test bandwidth --size 1048576
run bw2 --test bandwidth --size 1048576 --batch 2
rm -f "/dev/shm/ferry-softib-$(id -u)/bench-$$".* 2>/dev/null || true

bare_p50=$(echo "$bare" | key p50_us)
mc=$(echo "$bare" | key memcpy_1mb_gbps)
lat_p50=$(echo "$lat" | key p50_us)
best=0
for r in "$(echo "$rate1" | key rps)" "$(echo "$rate8" | key rps)" "$(echo "$rate32" | key rps)"; do
	best=$(awk -v a="$best" -v b="${r:-0}" 'BEGIN { print (b > a) ? b : a }')
done
g=$(echo "$bw" | key gbps)
g2=$(echo "$bw2" | key gbps)

echo
printf '%-40s %12s %12s %8s %8s\n' "measure" "softib" "reference" "ratio" "target"
printf '%-40s %12s %12s %8s %8s\n' "32 B latency p50 (us) vs shm ping-pong" "${lat_p50:-?}" "${bare_p50:-?}" "$(ratio "$lat_p50" "$bare_p50")" "<= 10"
printf '%-40s %12s %12s %8s %8s\n' "small RPCs/s, best batch (1, 8, 32)" "$best" "2000000" "$(ratio "$best" 2000000)" ">= 1"
printf '%-40s %12s %12s %8s %8s\n' "1 MB bandwidth (Gbit/s) vs memcpy" "${g:-?}" "${mc:-?}" "$(ratio "$g" "$mc")" ">= 0.5"
printf '%-40s %12s %12s %8s %8s\n' "  same, 2 requests in flight" "${g2:-?}" "${mc:-?}" "$(ratio "$g2" "$mc")" "-"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
