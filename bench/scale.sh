#!/bin/sh
# bench/scale.sh: how ferry's cost grows with the number of connections.
#
# Sweeps redis-benchmark GET over the client count (-c 1, 50, 200, 1000, 4000
# and 10000 by default), a fresh redis-server per figure, over kernel TCP and
# each ferry transport in turn, and prints requests per second, ferry's ratio
# to the kernel, p50 and p99 latency, and the server's resident memory per
# connection (its peak RSS during the run less its RSS before, divided by
# the clients, from 200 clients up; socket buffers the kernel holds are not
# in it). Then sockperf
# ping-pong, TCP, 64 B, for the kernel and each transport, next to the bare
# references: bench/udp_pingpong (a busy-polled UDP ping-pong) and
# bench/shm_pingpong (two processes on one cache line). sockperf reports
# half the round trip; the table shows whole round trips for all of them.
#
# Every ferry figure is checked against the FERRY_STATS counters: one the
# kernel carried instead is marked FALLBACK. With gnuplot installed, the
# curves are drawn in OUTDIR/scale.png (the data in OUTDIR/scale.dat).
#
# Usage: bench/scale.sh [-B BUILDDIR] [-t "udp softib"] [-c "1 50 ..."] [-o OUTDIR]
#   BUILDDIR   a configured and built tree (default: the current directory)
#   -t         ferry transports (default: udp, plus softib where it works)
#   -c         client counts (default: 1 50 200 1000 4000 10000)
#   -o         where scale.dat and scale.png go (default: the current directory)
#   -s         seconds of each sockperf run (default 3)
# The open-file limit is raised to its hard limit; a client count that does
# not fit under it is skipped with a note. Run it on a quiet machine.

set -u
builddir=$(pwd)
transports=
counts="1 50 200 1000 4000 10000"
outdir=$(pwd)
secs=3
while [ $# -gt 0 ]; do
	case $1 in
	-B) builddir=$2; shift 2 ;;
	-t) transports=$2; shift 2 ;;
	-c) counts=$2; shift 2 ;;
	-o) outdir=$2; shift 2 ;;
	-s) secs=$2; shift 2 ;;
	-h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "scale.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
bench_build "$builddir"
bench_need redis-server redis-benchmark ss
[ -z "$transports" ] && transports=$(default_transports)
mkdir -p "$outdir" && outdir=$(cd "$outdir" && pwd) || exit 2
ulimit -n "$(ulimit -Hn)" 2>/dev/null
fd_limit=$(ulimit -n)

bench_workdir scale

rss_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null; }

# redis_point MODE CLIENTS: prints "rps p50_ms p99_ms rss_per_conn_bytes".
redis_point() {
	mode=$1
	clients=$2
	port=$(free_port)
	tag=srv
	rm -f "$stats"/stats-*.json
	serve "$mode" "$work/server.log" redis-server --port "$port" --bind 127.0.0.1 --save "" \
		--appendonly no --protected-mode no --daemonize no --maxclients $((clients + 32))
	wait_listen "$port" || { echo "server did not start: $(tail -3 "$work/server.log")" >&2; exit 1; }
	before=$(rss_kb $server_pid VmRSS)
	requests=$((clients * 20))
	[ $requests -lt 50000 ] && requests=50000
	tag=cli
	with "$mode" redis-benchmark -p "$port" -t get -c "$clients" -n "$requests" --csv \
		>"$work/bench.csv" 2>"$work/bench.err"
	peak=$(rss_kb $server_pid VmHWM)
	kill -TERM $server_pid 2>/dev/null
	wait $server_pid 2>/dev/null
	server_pid=
	# "GET",rps,avg,min,p50,p95,p99,max
	tr -d '"' <"$work/bench.csv" | awk -F, -v b="${before:-0}" -v p="${peak:-0}" -v c="$clients" '
		$1 == "GET" {r = $2; p50 = $5; p99 = $7}
		END {printf "%d %s %s %d\n", r, (p50 ? p50 : 0), (p99 ? p99 : 0), (p - b) * 1024 / c}'
}

# sockperf_rtt MODE: prints "p50_us p99_us" of the round trip.
sockperf_rtt() {
	mode=$1
	port=$(free_port)
	tag=srv
	rm -f "$stats"/stats-*.json
	serve "$mode" "$work/sp-server.log" sockperf sr --tcp -i 127.0.0.1 -p "$port"
	wait_listen "$port" || { echo "sockperf server did not start" >&2; exit 1; }
	tag=cli
	with "$mode" sockperf pp --tcp -i 127.0.0.1 -p "$port" -m 64 -t "$secs" >"$work/sp.log" 2>&1
	kill -TERM $server_pid 2>/dev/null
	wait $server_pid 2>/dev/null
	server_pid=
	awk '/percentile 50.000 =/ {p50 = $NF} /percentile 99.000 =/ {p99 = $NF}
		END {printf "%.2f %.2f\n", p50 * 2, p99 * 2}' "$work/sp.log"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.2f", a / b }'; }
key() { sed -n "s/.*\"$1\":\([-0-9.e+]*\).*/\1/p"; }

modes="kernel $transports"
dat=$outdir/scale.dat
echo "# clients $(for m in $modes; do printf '%s_rps %s_p50_ms %s_p99_ms %s_rss_per_conn ' $m $m $m $m; done)" >"$dat"
table=$work/table
: >"$table"
for c in $counts; do
	if [ $((c + 100)) -gt "$fd_limit" ]; then
		echo "note: -c $c needs about $((c + 100)) open files; the limit is $fd_limit: skipped" >&2
		continue
	fi
	row="$c"
	line=$(printf '%-8s' "$c")
	krps=0
	for m in $modes; do
		echo "redis-benchmark -c $c over $m ..." >&2
		set -- $(redis_point "$m" "$c")
		row="$row $1 $2 $3 $4"
		[ "$m" = kernel ] && krps=$1
		mark=$(path_mark "$m")
		# Below 200 clients the start-up's allocations swamp the share of one.
		mem="$4 B/conn"
		[ "$c" -lt 200 ] && mem="-"
		cell="$1 ($2/$3 ms, $mem)"
		[ "$m" != kernel ] && cell="$1 $(ratio "$1" "$krps")x ($2/$3 ms, $mem)$mark"
		line="$line | $cell"
	done
	echo "$row" >>"$dat"
	echo "$line" >>"$table"
done

echo "sockperf ping-pong ..." >&2
rtts=$work/rtts
: >"$rtts"
if command -v sockperf >/dev/null; then
	for m in $modes; do
		set -- $(sockperf_rtt "$m")
		echo "sockperf TCP 64 B, $m|$1|$2|$(path_mark "$m")" >>"$rtts"
	done
else
	echo "note: sockperf is not installed: no ping-pong rows" >&2
fi
bare_udp=
if [ -x "$builddir/bench/udp_pingpong" ]; then
	bare_udp=$("$builddir/bench/udp_pingpong" --size 64)
	echo "bare UDP ping-pong, 64 B|$(echo "$bare_udp" | key p50_us)|$(echo "$bare_udp" | key p99_us)|" >>"$rtts"
fi
bare_shm=
if [ -x "$builddir/bench/shm_pingpong" ]; then
	bare_shm=$("$builddir/bench/shm_pingpong" --size 64 --memcpy-seconds 0)
	echo "bare shared-memory ping-pong, 64 B|$(echo "$bare_shm" | key p50_us)|$(echo "$bare_shm" | key p99_us)|" >>"$rtts"
fi

echo
echo "redis-benchmark GET: requests/s, ferry/kernel, p50/p99, server RSS per connection"
printf '%-8s' clients
for m in $modes; do printf ' | %s' "$m"; done
echo
cat "$table"
echo
echo "round trip, p50 and p99 (us)"
awk -F'|' '{printf "%-40s %10s %10s%s\n", $1, $2, $3, $4}' "$rtts"
p50_of() { awk -F'|' -v l="$1" '$1 == l {print $2}' "$rtts"; }
for t in $transports; do
	case $t in
	udp) ref="bare UDP ping-pong, 64 B"; goal="<= 1.3" ;;
	*) ref="bare shared-memory ping-pong, 64 B"; goal="<= 3" ;;
	esac
	mine=$(p50_of "sockperf TCP 64 B, $t")
	bare=$(p50_of "$ref")
	[ -n "$mine" ] && [ -n "$bare" ] &&
		echo "$t p50 / $ref p50: $(ratio "$mine" "$bare") (goal $goal)"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"

if command -v gnuplot >/dev/null && [ "$(wc -l <"$dat")" -gt 1 ]; then
	png=$outdir/scale.png
	plots_ratio=
	plots_p50=
	i=0
	for m in $modes; do
		rc=$((2 + i * 4))
		pc=$((3 + i * 4))
		[ "$m" != kernel ] &&
			plots_ratio="$plots_ratio${plots_ratio:+, }'$dat' using 1:(\$$rc/\$2) with linespoints title '$m / kernel'"
		plots_p50="$plots_p50${plots_p50:+, }'$dat' using 1:$pc with linespoints title '$m p50'"
		i=$((i + 1))
	done
	gnuplot <<-EOF
		set terminal png size 1000,420
		set output '$png'
		set multiplot layout 1,2
		set logscale x
		set xlabel 'clients (redis-benchmark -c)'
		set grid
		set ylabel 'GET throughput, ferry / kernel TCP'
		set yrange [0:*]
		plot $plots_ratio, 1 with lines dashtype 2 title 'kernel'
		set logscale y
		set yrange [*:*]
		set ylabel 'p50 latency (ms)'
		plot $plots_p50
		unset multiplot
	EOF
	echo "plot: $png (data: $dat)"
fi
