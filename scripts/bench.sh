#!/bin/sh
# Runs the transport microbenchmarks over udp in one go and prints the ratios
# the targets are stated in:
#   ferry latency p50 / bare UDP ping-pong p50   (bench/udp_pingpong)
#   rate with 8 outstanding / rate with 1
#   bandwidth with 0.1% loss / bandwidth without
# usage: scripts/bench.sh BUILD_DIR [SECONDS_PER_RUN]
# BUILD_DIR is a configured build tree where bench/ferry-bench has been built
# (make bench/ferry-bench bench/udp_pingpong). Raw JSON lines go to stdout
# first, then the table.
set -e
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [SECONDS_PER_RUN]" >&2; exit 2; }
build=$(cd "$1" && pwd)
secs=${2:-2}
fb="$build/bench/ferry-bench"
pp="$build/bench/udp_pingpong"
[ -x "$fb" ] || { echo "$fb is missing: run 'make bench/ferry-bench' in $build" >&2; exit 1; }

# Value of a numeric key in a one-line JSON object.
key() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
run() { # label, ferry-bench arguments...
	label=$1; shift
	out=$("$fb" --transport udp --seconds "$secs" "$@") || { echo "$label: ferry-bench failed" >&2; out=; }
	echo "$out"
	eval "$label=\$out"
}

if [ -x "$pp" ]; then
	bare=$("$pp") || bare=
	echo "$bare"
else
	echo "note: $pp not built; no bare UDP baseline (make bench/udp_pingpong)" >&2
	bare=
fi
run lat --test latency
run rate1 --test rate --batch 1
run rate8 --test rate --batch 8
run bw --test bandwidth --size 1048576
run bwdrop --test bandwidth --size 1048576 --drop 0.001

bare_p50=$(echo "$bare" | key p50_us)
lat_p50=$(echo "$lat" | key p50_us)
r1=$(echo "$rate1" | key rps)
r8=$(echo "$rate8" | key rps)
g0=$(echo "$bw" | key gbps)
g1=$(echo "$bwdrop" | key gbps)

echo
printf '%-34s %12s %12s %8s\n' "measure" "ferry" "reference" "ratio"
printf '%-34s %12s %12s %8s\n' "latency p50 (us) vs bare UDP" "${lat_p50:-?}" "${bare_p50:-?}" "$(ratio "$lat_p50" "$bare_p50")"
printf '%-34s %12s %12s %8s\n' "rate batch 8 vs batch 1 (req/s)" "${r8:-?}" "${r1:-?}" "$(ratio "$r8" "$r1")"
printf '%-34s %12s %12s %8s\n' "bandwidth 1 MB, 0.1% loss (Gbit/s)" "${g1:-?}" "${g0:-?}" "$(ratio "$g1" "$g0")"
