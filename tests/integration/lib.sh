# Shared by the integration tests (sourced, POSIX sh): paths, transport,
# process bookkeeping with cleanup on any exit, free ports, counter sums.
#
# Environment: FERRY_TEST_BUILDDIR / FERRY_TEST_SRCDIR (set by make check),
# FERRY_TEST_TRANSPORT (udp by default; a list such as "udp softib" runs the
# script once per transport) or the first argument of the test script,
# FERRY_TEST_KEEP=1 keeps the work directory.
# The transport "kernel" runs the same steps with nothing preloaded and no
# counter checks: it validates a script itself, never ferry.

set -u

builddir=${FERRY_TEST_BUILDDIR:-$(pwd)}
srcdir=${FERRY_TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
transport=${1:-${FERRY_TEST_TRANSPORT:-udp}}
ferry_run=$builddir/ferry-run
test_name=$(basename "$0" .sh)

# A list of transports ("udp softib") runs the whole script once per transport.
case $transport in
*" "*)
	[ $# -gt 0 ] && shift
	all_rc=77
	for t in $transport; do
		FERRY_TEST_TRANSPORT=$t sh "$0" "$t" "$@"
		rc=$?
		if [ $rc -eq 0 ]; then
			[ $all_rc -eq 77 ] && all_rc=0
		elif [ $rc -ne 77 ]; then
			all_rc=1
		fi
	done
	exit $all_rc
	;;
esac

# Nothing the caller set may leak into the runs we compare.
unset LD_PRELOAD FERRY_ENABLE FERRY_TRANSPORT FERRY_PORTS FERRY_STATS FERRY_PEERS 2>/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-$test_name.XXXXXX")
pids=

log() { echo "[$test_name $(date +%H:%M:%S)] $*"; }

fail() {
	echo "FAIL: $test_name ($transport): $*"
	exit 1
}

skip() {
	echo "SKIP: $test_name: $*"
	exit 77
}

# Kills what we started (only those pids), TERM first, then KILL.
cleanup() {
	rc=$?
	trap - EXIT INT TERM
	for _p in $pids; do kill -TERM "$_p" 2>/dev/null; done
	for _p in $pids; do
		_i=0
		while kill -0 "$_p" 2>/dev/null && [ $_i -lt 30 ]; do sleep 0.1; _i=$((_i + 1)); done
		kill -KILL "$_p" 2>/dev/null
	done
	if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
		for f in "$work"/*.log; do
			[ -s "$f" ] || continue
			echo "--- $f (last 20 lines)"
			tail -20 "$f"
		done
	fi
	if [ "${FERRY_TEST_KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

need() { # binary...
	for b in "$@"; do
		command -v "$b" >/dev/null 2>&1 || skip "$b is not installed"
	done
}

# Whether counters are there to check (not in kernel mode).
counting() { [ "$transport" != kernel ]; }

need_ferry() {
	if ! counting; then
		# Stands in for ferry-run: drops its options, preloads nothing.
		ferry_run=$work/kernel-run
		cat >"$ferry_run" <<'EOS'
#!/bin/sh
while [ $# -gt 0 ]; do
	case $1 in
	--transport | --stats | --ports | --spin-us | --peers | --log | --log-file | --lib) shift 2 ;;
	--*) shift ;;
	*) break ;;
	esac
done
exec "$@"
EOS
		chmod +x "$ferry_run"
		return 0
	fi
	[ -x "$ferry_run" ] || skip "ferry-run not built in $builddir"
	lib=$("$ferry_run" --print-lib | cut -f1)
	[ -f "$lib" ] || skip "libferry.so not built ($lib)"
}

# In a sanitizer build ferry-run preloads libasan into every program; some
# programs hang under that preload alone, without ferry (curl and postgres
# deadlock on a glibc locale lock at start): skip rather than hang.
need_sanitizer_ok() { # "program args"... (a command that exits 0 at once)
	_san=$(sed -n "s/^san_preload='\(.*\)'$/\1/p" "$builddir/ferry-run" 2>/dev/null)
	[ -n "$_san" ] || return 0
	for _c in "$@"; do
		# shellcheck disable=SC2086 # the command's words
		LD_PRELOAD="$_san" ASAN_OPTIONS=detect_leaks=0 timeout 10 $_c >/dev/null 2>&1 ||
			skip "'$_c' does not run under the sanitizer preload alone (without ferry) here"
	done
}

# bg NAME CMD...: starts CMD in the background, logs to $work/NAME.log.
bg() {
	_name=$1
	shift
	"$@" >"$work/$_name.log" 2>&1 &
	last_pid=$!
	pids="$pids $last_pid"
}

# ferry NAME CMD...: CMD preloaded, its counters in $work/NAME-<pid>.json.
ferry_cmd() {
	_name=$1
	shift
	"$ferry_run" --transport "$transport" --stats "$work/stats-$_name-%p.json" "$@"
}

# bgf NAME CMD...: bg with CMD preloaded (counters in stats-NAME-<pid>.json).
bgf() {
	_name=$1
	shift
	bg "$_name" "$ferry_run" --transport "$transport" --stats "$work/stats-$_name-%p.json" "$@"
}

# ping_redis PORT LAUNCHER...: starts redis-server on 127.0.0.1:PORT under
# LAUNCHER (ferry-run with its flags, or env with variables), PINGs it
# through ferry-run, and stops it; $server is its pid afterwards.
ping_redis() {
	_port=$1
	shift
	bg server "$@" redis-server --port "$_port" --bind 127.0.0.1 --save "" --appendonly no \
		--protected-mode no --daemonize no
	server=$last_pid
	wait_listen "$_port"
	_r=$(timeout 60 "$ferry_run" --transport "$transport" --stats "$work/stats-cli-%p.json" \
		redis-cli -p "$_port" PING) || fail "redis-cli through ferry-run failed"
	expect_eq "PING through ferry-run" "$_r" PONG
	kill -TERM "$server"
	wait_exit "$server" 30 || fail "redis-server exited with an error"
}

# A TCP port free for both TCP and UDP (a ferry listener also binds UDP),
# outside the kernel's ephemeral range: a client's port (ferry pools bound
# ones, which ss does not list) can land on one from there between this
# check and the server's bind.
free_port() {
	_i=0
	read -r _lo _hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { _lo=32768 _hi=60999; }
	while [ $_i -lt 200 ]; do
		if [ "$_lo" -ge 11024 ]; then
			_p=$((10000 + $(od -An -N2 -tu2 /dev/urandom) % (_lo - 10000)))
		else
			_p=$((_hi + 1 + $(od -An -N2 -tu2 /dev/urandom) % (65535 - _hi)))
		fi
		if ! ss -Htuan 2>/dev/null | awk '{print $5}' | grep -q ":$_p\$"; then
			echo "$_p"
			return 0
		fi
		_i=$((_i + 1))
	done
	fail "no free port"
}

# Waits (10 s) until a TCP listener is up on 127.0.0.1:PORT, without connecting.
# tcpcat_echo WHAT PORT STATS: $work/in sent through $tcpcat to
# 127.0.0.1:PORT under ferry-run (counters in stats-STATS-<pid>.json) comes
# back into $work/out byte for byte.
tcpcat_echo() {
	timeout 60 "$ferry_run" --transport "$transport" --stats "$work/stats-$3-%p.json" \
		"$tcpcat" 127.0.0.1 "$2" <"$work/in" >"$work/out" 2>"$work/cli.err" ||
		fail "$1: tcpcat failed: $(cat "$work/cli.err")"
	cmp -s "$work/in" "$work/out" ||
		fail "$1: $(wc -c <"$work/out") bytes came back, or other bytes"
}

wait_listen() {
	_i=0
	while [ $_i -lt 100 ]; do
		ss -Hltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
		sleep 0.1
		_i=$((_i + 1))
	done
	fail "nothing listens on port $1"
}

# Waits (10 s) until $work/NAME.log has a line starting with WORD, while
# PID lives (the ready line of a client started with bg or bgf).
wait_line() { # name word pid
	_i=0
	until grep -q "^$2" "$work/$1.log"; do
		_i=$((_i + 1))
		[ $_i -lt 200 ] || fail "$1 never said '$2': $(tail -2 "$work/$1.log")"
		kill -0 "$3" 2>/dev/null || fail "$1 died: $(tail -2 "$work/$1.log")"
		sleep 0.05
	done
}

# Waits for a pid to exit by itself (bounded); returns its status.
wait_exit() { # pid seconds
	_i=0
	while kill -0 "$1" 2>/dev/null && [ $_i -lt $(($2 * 10)) ]; do
		sleep 0.1
		_i=$((_i + 1))
	done
	kill -0 "$1" 2>/dev/null && fail "pid $1 did not exit within $2 s"
	wait "$1"
}

# Sum of one integer counter over the stats files matching a glob suffix.
stat_sum() { # key [name-prefix]
	cat "$work"/stats-${2:-}*.json 2>/dev/null | grep -o "\"$1\":[0-9]*" |
		cut -d: -f2 | awk '{s += $1} END {print s + 0}'
}

stat_files() { ls "$work"/stats-${1:-}*.json 2>/dev/null | wc -l; }

# Every stats file of a name prefix names the transport under test.
check_transport() { # [name-prefix]
	counting || return 0
	for f in "$work"/stats-${1:-}*.json; do
		[ -f "$f" ] || fail "no counters written (stats-${1:-}*.json)"
		grep -q "\"transport\":\"$transport\"" "$f" ||
			fail "$(basename "$f") ran over $(grep -o '"transport":"[a-z]*"' "$f"), not $transport"
	done
}

expect_ge() { # what value minimum
	[ "$2" -ge "$3" ] || fail "$1 = $2, expected at least $3"
	log "$1 = $2 (>= $3)"
}

expect_le() { # what value maximum
	[ "$2" -le "$3" ] || fail "$1 = $2, expected at most $3"
	log "$1 = $2 (<= $3)"
}

expect_eq() { # what value wanted
	[ "$2" = "$3" ] || fail "$1 = $2, expected $3"
	log "$1 = $2"
}

# The same for counters, which kernel mode does not have.
counter_ge() {
	if counting; then expect_ge "$@"; else log "$1: no counters in kernel mode"; fi
}

counter_eq() {
	if counting; then expect_eq "$@"; else log "$1: no counters in kernel mode"; fi
}
