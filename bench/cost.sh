#!/bin/sh
# bench/cost.sh: what one request costs at each end, in numbers noise does
# not move: instructions (callgrind), system calls (strace -c), and locks
# (callgrind's call counts: ferry's endpoint lock, and every pthread mutex).
#
# redis-benchmark GET at -c 1 against redis-server, over kernel TCP and each
# ferry transport. Each end is counted on its own, the other end running
# plainly: instructions per request are the difference between a run of
# LONG and one of SHORT requests, divided by the difference, so start-up
# and exit cancel out, and so are the locks; system calls per request are
# strace -c -f's total over LONG requests, divided by them. Spinning is
# off (FERRY_SPIN_US=0): a spin's instructions depend on timing, not on the
# work.
#
# Usage: bench/cost.sh [-B BUILDDIR] [-t "udp softib"] [-n "SHORT LONG"]
#   BUILDDIR   a configured and built tree (default: the current directory)
#   -t         ferry transports (default: udp, plus softib where it works)
#   -n         request counts of the two runs (default: "2000 12000")

set -u
builddir=$(pwd)
transports=
short=2000
long=12000
while [ $# -gt 0 ]; do
	case $1 in
	-B) builddir=$2; shift 2 ;;
	-t) transports=$2; shift 2 ;;
	-n) short=${2% *}; long=${2#* }; shift 2 ;;
	-h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "cost.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
bench_build "$builddir"
bench_need redis-server redis-benchmark ss valgrind strace
[ -z "$transports" ] && transports=$(default_transports)
FERRY_SPIN_US=0
export FERRY_SPIN_US

bench_workdir cost

callgrind() { echo valgrind --tool=callgrind --callgrind-out-file="$work/cg.out"; }
strace_c() { echo strace -f -c -o "$work/strace.txt"; }

# one MODE WHO TOOL REQUESTS: runs redis-server and redis-benchmark over
# MODE with TOOL (a command prefix) in front of WHO (server or client).
one() {
	mode=$1 who=$2 tool=$3 requests=$4
	port=$(free_port)
	rm -f "$work/cg.out" "$work/strace.txt"
	srv_tool=
	[ "$who" = server ] && srv_tool=$tool
	tag=srv
	# shellcheck disable=SC2086 # the tool is words
	serve "$mode" "$work/server.log" $srv_tool redis-server --port "$port" --bind 127.0.0.1 \
		--save "" --appendonly no --protected-mode no --daemonize no
	i=0
	until redis-cli -p "$port" ping >/dev/null 2>&1; do
		i=$((i + 1)); [ $i -lt 600 ] || { echo "server did not start" >&2; exit 1; }; sleep 0.1
	done
	cli_tool=
	[ "$who" = client ] && cli_tool=$tool
	tag=cli
	rm -f "$stats"/stats-cli-*.json
	# shellcheck disable=SC2086
	with "$mode" $cli_tool redis-benchmark -p "$port" -t get -c 1 -n "$requests" -q \
		>"$work/bench.out" 2>&1
	mark=$(path_mark "$mode")
	target=$server_pid
	# strace -o blocks fatal signals: the server is its child.
	case $srv_tool in strace*) target=$(ps -o pid= --ppid "$server_pid" | head -1 | tr -d ' ') ;; esac
	kill -TERM "$target"
	wait $server_pid 2>/dev/null
	server_pid=
	[ -n "$mark" ] && echo "warning: $mode $who run:$mark" >&2
}

instructions() { sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$work/cg.out"; }
syscalls() { awk '$NF == "total" {print $4}' "$work/strace.txt"; }
# calls_to REGEX: calls callgrind counted to the functions whose names match
# (the file names a function once, by number, and by the number after).
calls_to() {
	awk -v pat="$1" '
	/^c?fn=\(/ {
		s = $0; sub(/^c?fn=\(/, "", s)
		id = s; sub(/\).*/, "", id)
		rest = s; sub(/^[0-9]+\) ?/, "", rest)
		if (rest != "") name[id] = rest
		if ($0 ~ /^cfn=/) callee = id
		next
	}
	/^calls=/ { split($0, a, /[= ]/); if (name[callee] ~ pat) n += a[2] }
	END { print n + 0 }' "$work/cg.out"
}
# The endpoint lock (ferry's rpc lock, taken or tried), and every pthread
# mutex taken or tried in the process (the application's own, libc's and
# ferry's, the endpoint lock among them).
endpoint_locks() { calls_to '^rpc_(try)?lock$'; }
mutex_ops() { calls_to '^pthread_mutex_(try)?lock(@.*)?$'; }

printf '%-8s %-7s %14s %12s %15s %12s\n' path end "instr/request" "calls/request" \
	"endpoint locks" "mutex ops"
for m in kernel $transports; do
	for who in server client; do
		one "$m" "$who" "$(callgrind)" "$short"
		i_short=$(instructions) e_short=$(endpoint_locks) x_short=$(mutex_ops)
		one "$m" "$who" "$(callgrind)" "$long"
		i_long=$(instructions) e_long=$(endpoint_locks) x_long=$(mutex_ops)
		one "$m" "$who" "$(strace_c)" "$long"
		calls=$(syscalls)
		awk -v m="$m" -v w="$who" -v a="${i_short:-0}" -v b="${i_long:-0}" -v c="${calls:-0}" \
			-v ea="$e_short" -v eb="$e_long" -v xa="$x_short" -v xb="$x_long" \
			-v s="$short" -v l="$long" \
			'BEGIN {printf "%-8s %-7s %14.0f %12.2f %15.2f %12.2f\n", m, w, (b - a) / (l - s),
				c / l, (eb - ea) / (l - s), (xb - xa) / (l - s)}'
	done
done
