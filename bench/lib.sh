# bench/lib.sh: what the bench scripts share; sourced, not run.
# Needs $work (a scratch directory) before with/stat_sum are used.

# bench_build DIR: checks DIR is a built tree; sets builddir, ferry_run, lib.
bench_build() {
	builddir=$(cd "$1" && pwd) || exit 2
	ferry_run=$builddir/ferry-run
	[ -x "$ferry_run" ] || { echo "$0: no ferry-run in $builddir: build first (make)" >&2; exit 2; }
	lib=$("$ferry_run" --print-lib | cut -f1)
	[ -f "$lib" ] || { echo "$0: $lib is not built" >&2; exit 2; }
}

# bench_need PROGRAM...: says which is missing, if one is.
bench_need() {
	for b in "$@"; do
		command -v "$b" >/dev/null || { echo "$(basename "$0"): $b is not installed" >&2; exit 2; }
	done
}

# bench_workdir NAME: a scratch directory, $work, and $stats for the ferry
# processes' counters (on tmpfs where there is one), removed at exit after the
# server ($server_pid) is stopped and bench_cleanup_more, if defined, has run.
bench_workdir() {
	work=$(mktemp -d "${TMPDIR:-/tmp}/ferry-$1.XXXXXX")
	chmod 1777 "$work"
	# Every ferry process writes its counters at exit: on tmpfs, where a
	# file costs what a user's FERRY_STATS costs. On ext4, creating and
	# removing one per process took a tenth of pgbench -S -C's throughput
	# (ext4's inode allocator), a cost the kernel's runs never paid.
	stats=$(mktemp -d /dev/shm/ferry-$1-stats.XXXXXX 2>/dev/null) || stats=$work
	chmod 1777 "$stats"
	server_pid=
	trap bench_cleanup EXIT
	trap 'exit 1' INT TERM
}

bench_cleanup() {
	[ -n "$server_pid" ] && kill -TERM $server_pid 2>/dev/null
	command -v bench_cleanup_more >/dev/null && bench_cleanup_more
	rm -rf "$work" "$stats"
}

# A port no TCP or UDP socket of the host uses, outside the kernel's
# ephemeral range (a client's port could land there before the bind).
free_port() {
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { lo=32768 hi=60999; }
	while :; do
		if [ "$lo" -ge 11024 ]; then
			p=$((10000 + $(od -An -N2 -tu2 /dev/urandom) % (lo - 10000)))
		else
			p=$((hi + 1 + $(od -An -N2 -tu2 /dev/urandom) % (65535 - hi)))
		fi
		ss -Htuan | awk '{print $5}' | grep -q ":$p\$" || { echo $p; return; }
	done
}

wait_listen() {
	i=0
	until ss -Hltn "sport = :$1" | grep -q LISTEN; do
		i=$((i + 1)); [ $i -lt 200 ] || return 1; sleep 0.05
	done
}

# with MODE CMD...: CMD plainly (kernel) or preloaded over transport MODE,
# counters to $stats/stats-$tag-<pid>.json.
with() {
	mode=$1
	shift
	if [ "$mode" = kernel ]; then
		"$@"
	else
		"$ferry_run" --transport "$mode" --stats "$stats/stats-$tag-%p.json" "$@"
	fi
}

# serve MODE LOG CMD...: starts CMD in the background as with does, output to
# LOG; server_pid is the process itself (not a subshell), so it can be measured.
serve() {
	mode=$1
	log=$2
	shift 2
	[ "$mode" != kernel ] && set -- "$ferry_run" --transport "$mode" --stats "$stats/stats-$tag-%p.json" "$@"
	"$@" >"$log" 2>&1 &
	server_pid=$!
}

stat_sum() { # key tag
	cat "$stats"/stats-$2-*.json 2>/dev/null | grep -o "\"$1\":[0-9]*" | cut -d: -f2 |
		awk '{s += $1} END {print s + 0}'
}

# Whether the last run tagged $2 rode ferry over mode $1: "" if so, else a marker.
path_mark() {
	[ "$1" = kernel ] && return
	# Names of its own: callers loop over c.
	_carried=$(stat_sum streams_connected "${2:-cli}")
	_fell=$(stat_sum fallbacks "${2:-cli}")
	if [ "$_carried" -eq 0 ] || [ "$_fell" -gt 0 ]; then echo " FALLBACK($_fell)"; fi
}

# The transports to measure when none were named: udp, and softib where it works.
default_transports() {
	t=udp
	FERRY_TRANSPORT=softib "$ferry_run" --transport softib --check >/dev/null 2>&1 && t="udp softib"
	echo "$t"
}
