#!/bin/sh
# bench/forkconn.sh: what a connection to a fork-per-connection server costs
# (postgres, sshd, inetd: a new process per connection), kernel TCP against
# ferry, without the server's own work.
#
# bench/forkconn serves on loopback: it accepts, forks, and the child
# echoes 64 bytes and exits. The client makes N connections one after
# another. For each path: connections a second, the p50 and p99 of a whole
# connection, and CPU time per connection, split between the server's
# parent (all its threads), its children, and the client, from getrusage
# (the CPU time a second of wall clock cannot show on a busy machine), and
# the context switches of all three per connection. A ferry row whose
# client did not open a session to each child (its children did not carry
# their connections) is marked FALLBACK.
#
# Then, in a pass of its own (tracing slows every call), the system calls a
# connection costs, counted by strace -c -f: the server's (its parent, all
# threads, and its children) and the client's, all of them and those left
# when waits (poll, epoll_wait, futex, sched_yield...) and calls that failed
# (a look that found nothing: EAGAIN) are taken out. The second count moves
# much less with the machine's noise than times do; wake-ups still depend
# on timing, so compare it over a few hundred connections.
#
# Usage: bench/forkconn.sh [-B BUILDDIR] [-t "udp softib"] [-n N] [-r RUNS] [-s S]
#   BUILDDIR   a configured and built tree (default: the current directory)
#   -t         ferry transports (default: udp, plus softib where it works)
#   -n         connections per run (default 1000)
#   -r         runs of each path, taken in turns (default 1)
#   -s         connections of the system-call pass (default 200; 0 skips it)

set -u
builddir=$(pwd)
transports=
n=1000
runs=1
traced=200
while [ $# -gt 0 ]; do
	case $1 in
	-B) builddir=$2; shift 2 ;;
	-t) transports=$2; shift 2 ;;
	-n) n=$2; shift 2 ;;
	-r) runs=$2; shift 2 ;;
	-s) traced=$2; shift 2 ;;
	-h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "forkconn.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
bench_build "$builddir"
bench_need ss
[ "$traced" -gt 0 ] && bench_need strace
fc=$builddir/bench/forkconn
[ -x "$fc" ] || { echo "forkconn.sh: $fc is not built (make)" >&2; exit 2; }
[ -z "$transports" ] && transports=$(default_transports)
bench_workdir forkconn

# key NAME LINE: the value after NAME in a "key value ..." line.
key() { echo "$2" | awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }'; }

# The server's nth report (SIGUSR1), once it is written.
report() {
	kill -USR1 "$server_pid"
	i=0
	while [ "$(grep -c '^parent_cpu_us' "$work/server.out")" -lt "$1" ]; do
		i=$((i + 1)); [ $i -lt 100 ] || return 1; sleep 0.05
	done
	grep '^parent_cpu_us' "$work/server.out" | sed -n "${1}p"
}

# serve_warm MODE: the server on a free port (port, server_pid), its first
# connections made. Counters come from the client only: a file from each
# child would cost them what the kernel's children never pay.
serve_warm() {
	if [ "$1" = kernel ]; then
		"$fc" serve "$port" >"$work/server.out" 2>&1 &
	else
		"$ferry_run" --transport "$1" "$fc" serve "$port" >"$work/server.out" 2>&1 &
	fi
	server_pid=$!
	wait_listen "$port" || { echo "forkconn.sh: the server did not start" >&2; exit 1; }
	tag=warm
	with "$1" "$fc" connect "$port" 20 >/dev/null || exit 1
}

kernel_rate=
printf '%-8s %8s %7s %7s %7s %9s %9s %9s %9s %9s\n' path "conn/s" ratio "p50 us" "p99 us" \
	"parent us" "child us" "client us" "total us" "switches"
measure() { # MODE
	mode=$1
	port=$(free_port)
	serve_warm "$mode"
	sleep 0.2
	before=$(report 1) || exit 1
	tag=cli
	rm -f "$stats"/stats-cli-*.json
	out=$(with "$mode" "$fc" connect "$port" "$n") || exit 1
	sleep 0.3 # the last children exit and are reaped
	after=$(report 2) || exit 1
	kill -TERM "$server_pid" 2>/dev/null
	wait "$server_pid" 2>/dev/null
	server_pid=
	mark=
	if [ "$mode" != kernel ]; then
		# One session to each child: the children carried their
		# connections, straight to the client.
		[ "$(stat_sum sessions cli)" -ge "$n" ] || mark=" FALLBACK"
	fi
	rate=$(key per_s "$out")
	[ "$mode" = kernel ] && kernel_rate=$rate
	awk -v mode="$mode$mark" -v n="$n" -v rate="$rate" -v k="${kernel_rate:-0}" \
		-v p50="$(key p50_us "$out")" -v p99="$(key p99_us "$out")" \
		-v pc0="$(key parent_cpu_us "$before")" -v pc1="$(key parent_cpu_us "$after")" \
		-v cc0="$(key children_cpu_us "$before")" -v cc1="$(key children_cpu_us "$after")" \
		-v ps0="$(key parent_switches "$before")" -v ps1="$(key parent_switches "$after")" \
		-v cs0="$(key children_switches "$before")" -v cs1="$(key children_switches "$after")" \
		-v cli="$(key client_cpu_us "$out")" -v clis="$(key client_switches "$out")" 'BEGIN {
		par = (pc1 - pc0) / n; kid = (cc1 - cc0) / n
		ratio = k > 0 ? sprintf("%.2fx", rate / k) : "-"
		printf "%-8s %8d %7s %7d %7d %9d %9d %9d %9d %9.1f\n", mode, rate, ratio, p50, p99,
			par, kid, cli, par + kid + cli, (ps1 - ps0 + cs1 - cs0) / n + clis
	}'
}

r=0
while [ $r -lt "$runs" ]; do
	measure kernel
	for t in $transports; do
		measure "$t"
	done
	r=$((r + 1))
done

# syscalls MODE: "server client" system calls per connection over $traced
# connections, strace attached to the running server (-f: its threads and
# the children it forks) and in front of the client.
calls_in() { awk '$NF == "total" {print $4}' "$1"; }
work_in() {
	awk 'NR > 2 && $NF != "total" && $4 ~ /^[0-9]+$/ {
		if ($NF ~ /^(poll|ppoll|select|pselect6|epoll_wait|epoll_pwait|epoll_pwait2|futex|sched_yield|nanosleep|clock_nanosleep|wait4|restart_syscall)$/)
			next
		w += $4 - (NF == 6 ? $5 : 0)
	} END { print w + 0 }' "$1"
}
syscalls() {
	mode=$1
	port=$(free_port)
	serve_warm "$mode"
	rm -f "$work/st-server.txt" "$work/st-client.txt"
	strace -f -c -o "$work/st-server.txt" -p "$server_pid" 2>/dev/null &
	tracer=$!
	sleep 0.5 # attached to every thread
	tag=trace
	with "$mode" strace -f -c -o "$work/st-client.txt" "$fc" connect "$port" "$traced" \
		>/dev/null 2>&1 || exit 1
	sleep 0.3 # the last children exit
	kill -INT "$tracer" 2>/dev/null
	wait "$tracer" 2>/dev/null
	kill -TERM "$server_pid" 2>/dev/null
	wait "$server_pid" 2>/dev/null
	server_pid=
	awk -v s="$(calls_in "$work/st-server.txt")" -v c="$(calls_in "$work/st-client.txt")" \
		-v sw="$(work_in "$work/st-server.txt")" -v cw="$(work_in "$work/st-client.txt")" \
		-v n="$traced" 'BEGIN { printf "%.1f %.1f %.1f %.1f\n", s / n, sw / n, c / n, cw / n }'
}

if [ "$traced" -gt 0 ]; then
	echo
	echo "system calls per connection (strace -c -f, $traced connections, a pass of its own)"
	printf '%-8s %9s %13s %9s %13s\n' path server "server work" client "client work"
	for m in kernel $transports; do
		# shellcheck disable=SC2046 # four numbers
		set -- $(syscalls "$m")
		printf '%-8s %9s %13s %9s %13s\n' "$m" "$1" "$2" "$3" "$4"
	done
fi
