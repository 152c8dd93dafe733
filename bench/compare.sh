#!/bin/sh
# bench/compare.sh: redis and memcached over kernel TCP against ferry, in one go.
#
# Runs redis-benchmark SET and GET at -c 1, -c 50, -c 50 -P 16 and -c 50 -k 0
# (a new connection per request), and memcaslap (or memcslap), first over
# kernel TCP, then over each ferry transport, and prints one table: requests
# per second for each, ferry's ratio to the kernel, p50 latency at -c 1, and
# the server's system calls per request, counted by strace -c -f in a second,
# separate pass (tracing slows the server down, so it never touches the
# throughput figures). Every ferry figure is checked against the FERRY_STATS
# counters: a run that the kernel carried instead is marked "FALLBACK".
#
# Then the process models (--no-apps skips them): nginx with 2 workers under
# wrk -c 50 (1 KB GET), and postgres under pgbench -S -c 8 (with one client
# thread and with two) and -S -C (a new connection and backend per
# transaction), every program preloaded in turn.
#
# Usage: bench/compare.sh [-B BUILDDIR] [-t "udp softib"] [-n REQUESTS] [--no-strace] [--no-apps]
#   BUILDDIR   a configured and built tree (default: the current directory)
#   -t         ferry transports to measure (default: udp, plus softib when
#              ferry-run --check says it works; "none": kernel only)
#   -n         requests per redis-benchmark test (default 20000; -P 16 runs 5x)
#   -r         runs of each throughput figure; the median is reported (default 3)
# Figures are noisy on a shared 2-core machine: run it on a quiet box.

set -u
builddir=$(pwd)
transports=
n=20000
runs=3
use_strace=yes
use_apps=yes
while [ $# -gt 0 ]; do
	case $1 in
	-B) builddir=$2; shift 2 ;;
	-t) transports=$2; shift 2 ;;
	-n) n=$2; shift 2 ;;
	-r) runs=$2; shift 2 ;;
	--no-strace) use_strace=no; shift ;;
	--no-apps) use_apps=no; shift ;;
	-h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "compare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
. "$(dirname "$0")/lib.sh"
bench_build "$builddir"
bench_need redis-server redis-benchmark ss
[ $use_strace = yes ] && ! command -v strace >/dev/null && use_strace=no
if [ "$transports" = none ]; then
	transports=
elif [ -z "$transports" ]; then
	transports=$(default_transports)
fi
memc=
command -v memcaslap >/dev/null && memc=memcaslap
[ -z "$memc" ] && command -v memcslap >/dev/null && memc=memcslap
command -v memcached >/dev/null || memc=

bench_workdir compare
bench_cleanup_more() { [ -n "${pgdir:-}" ] && pg_stop; }

# server_start MODE TRACE(yes/no) KIND: starts redis or memcached, sets port/server_pid.
server_start() {
	port=$(free_port)
	tag=srv
	rm -f "$stats"/stats-srv-*.json
	if [ "$3" = redis ]; then
		set -- "$1" "$2" redis-server --port "$port" --bind 127.0.0.1 --save "" \
			--appendonly no --protected-mode no --daemonize no --maxclients 2000
	else
		# softib fabrics are per user: memcached serves as its clients' user there.
		muser=nobody
		[ "$1" = softib ] && muser=$(id -un)
		set -- "$1" "$2" memcached -u "$muser" -t 2 -p "$port" -U 0 -l 127.0.0.1 -m 256 -c 4096
	fi
	mode=$1
	trace=$2
	shift 2
	# One simple command in the background, so $! is the process itself.
	[ "$trace" = yes ] && set -- strace -f -c -o "$work/strace.txt" "$@"
	[ "$mode" != kernel ] && set -- "$ferry_run" --transport "$mode" --stats "$stats/stats-srv-%p.json" "$@"
	"$@" >"$work/server.log" 2>&1 &
	server_pid=$!
	wait_listen "$port" || { echo "server did not start: $(tail -3 "$work/server.log")" >&2; exit 1; }
}

# Stops the server; under strace, sets calls to the system calls it made.
server_stop() {
	target=$server_pid
	# Under strace the server is strace's child.
	[ "$trace" = yes ] && target=$(ps -o pid= --ppid "$server_pid" | head -1 | tr -d ' ')
	kill -TERM "$target" 2>/dev/null
	wait "$server_pid" 2>/dev/null
	server_pid=
	calls=
	[ "$trace" = yes ] && calls=$(awk '$NF == "total" {print $4}' "$work/strace.txt")
}

# redis_run MODE ARGS...: SET and GET figures as "set_rps set_p50 get_rps get_p50".
redis_run() {
	mode=$1
	shift
	tag=cli
	rm -f "$stats"/stats-cli-*.json
	with "$mode" redis-benchmark -p "$port" -t set,get -r 100000 -d 32 --csv "$@" \
		>"$work/bench.csv" 2>"$work/bench.err" || { echo "0 0 0 0"; return; }
	tr -d '"' <"$work/bench.csv" | awk -F, '
		$1 == "SET" {s = $2; sp = $5} $1 == "GET" {g = $2; gp = $5}
		END {print (s ? s : 0), (sp ? sp : 0), (g ? g : 0), (gp ? gp : 0)}'
}

memc_run() {
	mode=$1
	tag=cli
	rm -f "$stats"/stats-cli-*.json
	if [ "$memc" = memcaslap ]; then
		with "$mode" memcaslap -s "127.0.0.1:$port" -T 2 -c 50 -x "$n" >"$work/memc.log" 2>&1
		sed -n 's/.*TPS: \([0-9]*\).*/\1/p' "$work/memc.log" | tail -1
	else
		with "$mode" memcslap -s "127.0.0.1:$port" -t get -c 8 -e $((n / 8)) >"$work/memc.log" 2>&1
		sed -n 's/^Time to get *\([0-9]*\) keys.* \([0-9.]*\) seconds\./\1 \2/p' "$work/memc.log" |
			awk '{ if ($2 > 0) printf "%d\n", $1 / $2; else print 0 }'
	fi
}

# The median of each column of a file of runs (one run per line).
medians() {
	cols=$(head -1 "$1" | wc -w)
	c=1
	out=
	while [ $c -le "$cols" ]; do
		out="$out $(cut -d' ' -f$c "$1" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')"
		c=$((c + 1))
	done
	echo $out
}

configs="c1:-c 1 -n $((n / 4))
c50:-c 50 -n $n
c50P16:-c 50 -P 16 -n $((n * 5))
c50k0:-c 50 -k 0 -n $((n / 2))"

modes="kernel $transports"
results=$work/results
: >"$results"
for mode in $modes; do
	echo "measuring over $mode ..." >&2
	server_start "$mode" no redis
	while IFS=: read -r name args; do
		: >"$work/runs"
		marks=
		r=0
		while [ $r -lt "$runs" ]; do
			# shellcheck disable=SC2086
			redis_run "$mode" $args >>"$work/runs"
			marks="$marks$(path_mark "$mode")"
			r=$((r + 1))
		done
		echo "$mode redis $name $(medians "$work/runs") $(echo $marks | cut -d' ' -f1)" >>"$results"
	done <<EOF
$configs
EOF
	server_stop
	if [ "$use_strace" = yes ]; then
		while IFS=: read -r name args; do
			server_start "$mode" yes redis
			# shellcheck disable=SC2086
			set -- $(redis_run "$mode" $args)
			server_stop
			reqs=$(echo "$args" | sed 's/.*-n \([0-9]*\).*/\1/')
			echo "$mode sys $name $calls $((2 * reqs))" >>"$results"
		done <<EOF
$configs
EOF
	fi
	if [ -n "$memc" ]; then
		server_start "$mode" no memcached
		: >"$work/runs"
		marks=
		r=0
		while [ $r -lt "$runs" ]; do
			memc_run "$mode" >>"$work/runs"
			marks="$marks$(path_mark "$mode")"
			r=$((r + 1))
		done
		echo "$mode memc $memc $(medians "$work/runs") $(echo $marks | cut -d' ' -f1)" >>"$results"
		server_stop
		if [ "$use_strace" = yes ]; then
			server_start "$mode" yes memcached
			memc_run "$mode" >/dev/null
			server_stop
			echo "$mode sys memc $calls $n" >>"$results"
		fi
	fi
done

# --- nginx and postgres: a process per worker or per connection
nginx_run() { # MODE: wrk requests/s against nginx with 2 workers
	mode=$1
	mkdir -p "$work/ng/html" "$work/ng/logs"
	head -c 1024 /dev/urandom >"$work/ng/html/k1"
	port=$(free_port)
	cat >"$work/ng/nginx.conf" <<EOC
daemon off;
master_process on;
worker_processes 2;
$([ "$(id -u)" = 0 ] && echo "user $(id -un);")
error_log $work/ng/logs/error.log warn;
pid $work/ng/logs/nginx.pid;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path $work/ng/logs;
	proxy_temp_path $work/ng/logs;
	fastcgi_temp_path $work/ng/logs;
	uwsgi_temp_path $work/ng/logs;
	scgi_temp_path $work/ng/logs;
	server { listen 127.0.0.1:$port; root $work/ng/html; }
}
EOC
	tag=srv
	rm -f "$stats"/stats-srv-*.json
	with "$mode" nginx -c "$work/ng/nginx.conf" -p "$work/ng" >"$work/ng.log" 2>&1 &
	ng=$!
	wait_listen "$port" || { echo 0; return; }
	tag=cli
	rm -f "$stats"/stats-cli-*.json
	with "$mode" wrk -t 2 -c 50 -d 3 "http://127.0.0.1:$port/k1" >"$work/wrk.log" 2>&1
	kill -QUIT "$(cat "$work/ng/logs/nginx.pid" 2>/dev/null)" 2>/dev/null
	wait "$ng" 2>/dev/null
	# How the connections spread over nginx's processes (the kernel's
	# accept spreads them over the workers that are awake).
	if [ "$mode" != kernel ]; then
		printf '%s:' "$mode" >>"$work/nginx_split"
		for f in "$stats"/stats-srv-*.json; do
			grep -o '"streams_accepted":[0-9]*' "$f" | cut -d: -f2
		done | sort -rn | tr '\n' ' ' | sed 's/^/ /; s/ $//' >>"$work/nginx_split"
		echo >>"$work/nginx_split"
	fi
	if grep -q 'Socket errors\|Non-2xx' "$work/wrk.log"; then echo 0; return; fi
	awk '/Requests\/sec/ {printf "%d\n", $2}' "$work/wrk.log"
}

pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
# pgbench runs as postgres too: softib's fabric is one user's.
pgbench_as() { # MODE ARGS...
	m=$1
	shift
	pre=
	[ "$m" != kernel ] && pre="'$ferry_run' --transport $m --stats '$stats/stats-cli-%p.json'"
	su postgres -s /bin/sh -c "exec $pre pgbench -h 127.0.0.1 -p $pgport -U postgres $* postgres"
}
pg_start() { # MODE
	pgdir=$work/pg-$1
	mkdir -p "$pgdir" && chmod 777 "$pgdir"
	su postgres -s /bin/sh -c "'$pg_bin/initdb' -D '$pgdir/data' -A trust -U postgres" \
		>/dev/null 2>&1 || return 1
	pgport=$(free_port)
	pre=
	[ "$1" != kernel ] && pre="'$ferry_run' --transport $1 --stats '$stats/stats-pg-%p.json'"
	su postgres -s /bin/sh -c "exec $pre '$pg_bin/postgres' -D '$pgdir/data' -k '$pgdir' -p $pgport -c listen_addresses=127.0.0.1 -c fsync=off >'$pgdir/log' 2>&1" &
	wait_listen "$pgport" || return 1
	pgbench_as "$1" -i -s 4 -q >/dev/null 2>&1
}
pg_stop() {
	su postgres -s /bin/sh -c "'$pg_bin/pg_ctl' -D '$pgdir/data' stop -m fast" >/dev/null 2>&1
}
pg_tps() { # MODE ARGS...
	rm -f "$stats"/stats-cli-*.json
	pgbench_as "$@" 2>&1 | awk '/^tps/ {printf "%d\n", $3}' | head -1
}

if [ "$use_apps" = yes ]; then
	for mode in $modes; do
		if command -v nginx >/dev/null && command -v wrk >/dev/null; then
			echo "measuring nginx over $mode ..." >&2
			: >"$work/runs"
			marks=
			r=0
			while [ $r -lt "$runs" ]; do
				nginx_run "$mode" >>"$work/runs"
				marks="$marks$(path_mark "$mode")"
				r=$((r + 1))
			done
			echo "$mode app nginx_wrk_c50 $(medians "$work/runs") $(echo $marks | cut -d' ' -f1)" >>"$results"
		fi
		if [ -n "$pg_bin" ] && command -v pgbench >/dev/null && id postgres >/dev/null 2>&1 &&
			pg_start "$mode"; then
			echo "measuring postgres over $mode ..." >&2
			# -j 1 is pgbench's own default (one client thread); -j 2
			# puts two client threads on one ferry endpoint.
			for cfg in "S_c8j1:-S -c 8 -T 5" "S_c8:-S -c 8 -j 2 -T 5" "S_C:-S -C -c 4 -j 2 -T 5"; do
				: >"$work/runs"
				marks=
				r=0
				while [ $r -lt "$runs" ]; do
					# shellcheck disable=SC2086
					pg_tps "$mode" ${cfg#*:} >>"$work/runs"
					marks="$marks$(path_mark "$mode")"
					r=$((r + 1))
				done
				echo "$mode app pgbench_${cfg%%:*} $(medians "$work/runs") $(echo $marks | cut -d' ' -f1)" >>"$results"
			done
			pg_stop
		fi
	done
fi

# --- the table
awk -v modes="$modes" '
function ratio(a, b) { return (b > 0 && a > 0) ? sprintf("%.2fx", a / b) : "-" }
function per(c, r) { return (r > 0 && c != "") ? sprintf("%.1f", c / r) : "-" }
{
	if ($2 == "redis") {
		rps[$1, "SET " $3] = $4; p50[$1, "SET " $3] = $5
		rps[$1, "GET " $3] = $6; p50[$1, "GET " $3] = $7
		mark[$1, "SET " $3] = mark[$1, "GET " $3] = ($8 != "" ? " " $8 : "")
	} else if ($2 == "memc") {
		rps[$1, "memc"] = $4; mark[$1, "memc"] = ($5 != "" ? " " $5 : ""); memc_name = $3
	} else if ($2 == "app") {
		if (!(($3) in seen)) { seen[$3] = 1; apps[++napps] = $3 }
		rps[$1, $3] = $4; mark[$1, $3] = ($5 != "" ? " " $5 : "")
	} else if ($2 == "sys") {
		key = ($3 == "memc") ? "memc" : $3
		sys[$1, key] = per($4, $5)
	}
}
END {
	nm = split(modes, m, " ")
	hdr = "| test | kernel req/s"
	sep = "|---|---:"
	for (i = 2; i <= nm; i++) { hdr = hdr " | " m[i] " req/s | " m[i] "/kernel"; sep = sep "|---:|---:" }
	hdr = hdr " | syscalls/req kernel"
	sep = sep "|---:"
	for (i = 2; i <= nm; i++) { hdr = hdr " | syscalls/req " m[i]; sep = sep "|---:" }
	print hdr " |"; print sep "|"
	split("c1 c50 c50P16 c50k0", cf, " ")
	split("-c 1|-c 50|-c 50 -P 16|-c 50 -k 0", label, "|")
	for (c = 1; c <= 4; c++) for (t = 1; t <= 2; t++) {
		op = (t == 1) ? "SET" : "GET"; k = op " " cf[c]
		line = "| redis " op " " label[c] " | " rps["kernel", k]
		for (i = 2; i <= nm; i++)
			line = line " | " rps[m[i], k] mark[m[i], k] " | " ratio(rps[m[i], k], rps["kernel", k])
		for (i = 1; i <= nm; i++) {
			s = sys[m[i], cf[c]]; line = line " | " (s == "" ? "-" : s)
		}
		print line " |"
	}
	if (memc_name != "") {
		line = "| memcached (" memc_name ") | " rps["kernel", "memc"]
		for (i = 2; i <= nm; i++)
			line = line " | " rps[m[i], "memc"] mark[m[i], "memc"] " | " ratio(rps[m[i], "memc"], rps["kernel", "memc"])
		for (i = 1; i <= nm; i++) { s = sys[m[i], "memc"]; line = line " | " (s == "" ? "-" : s) }
		print line " |"
	}
	for (a = 1; a <= napps; a++) {
		k = apps[a]
		lbl = k == "nginx_wrk_c50" ? "nginx, 2 workers, wrk -c 50 (req/s)" : \
		      k == "pgbench_S_c8j1" ? "postgres, pgbench -S -c 8 -j 1 (tps)" : \
		      k == "pgbench_S_c8" ? "postgres, pgbench -S -c 8 -j 2 (tps)" : \
		      k == "pgbench_S_C" ? "postgres, pgbench -S -C (tps)" : k
		line = "| " lbl " | " rps["kernel", k]
		for (i = 2; i <= nm; i++)
			line = line " | " rps[m[i], k] mark[m[i], k] " | " ratio(rps[m[i], k], rps["kernel", k])
		for (i = 1; i <= nm; i++) line = line " | -"
		print line " |"
	}
	print ""
	line = "p50 latency at -c 1 (ms): kernel SET " p50["kernel", "SET c1"] " GET " p50["kernel", "GET c1"]
	for (i = 2; i <= nm; i++)
		line = line "; " m[i] " SET " p50[m[i], "SET c1"] " GET " p50[m[i], "GET c1"] \
			" (" ratio(p50[m[i], "GET c1"], p50["kernel", "GET c1"]) " of kernel)"
	print line
	print "syscalls/req: the server'"'"'s system calls (strace -c -f, all threads) per request answered."
	# The issue'"'"'s targets for the udp datapath on this machine, checked for every transport.
	for (i = 2; i <= nm; i++) {
		t = m[i]
		print ""
		print "targets, " t ":"
		target(t, "p50 at -c 1 at most 1/3 of kernel (GET)",
		       p50[t, "GET c1"] > 0 && p50[t, "GET c1"] * 3 <= p50["kernel", "GET c1"])
		target(t, "throughput at -c 50 at least kernel (SET and GET)",
		       rps[t, "SET c50"] >= rps["kernel", "SET c50"] && rps[t, "GET c50"] >= rps["kernel", "GET c50"])
		target(t, "-k 0 at least 2x kernel (SET and GET)",
		       rps[t, "SET c50k0"] >= 2 * rps["kernel", "SET c50k0"] && rps[t, "GET c50k0"] >= 2 * rps["kernel", "GET c50k0"])
		if (sys[t, "c50"] != "" && sys["kernel", "c50"] != "")
			target(t, "server syscalls/req at -c 50 at most half the kernel'"'"'s",
			       sys[t, "c50"] * 2 <= sys["kernel", "c50"])
		if (rps["kernel", "nginx_wrk_c50"] > 0)
			target(t, "nginx wrk -c 50 at least " (t == "udp" ? "1.3x" : "2x") " kernel",
			       rps[t, "nginx_wrk_c50"] >= (t == "udp" ? 1.3 : 2) * rps["kernel", "nginx_wrk_c50"])
		if (rps["kernel", "pgbench_S_c8"] > 0) {
			target(t, "pgbench -S -c 8 -j 1 at least 1.3x kernel",
			       rps[t, "pgbench_S_c8j1"] >= 1.3 * rps["kernel", "pgbench_S_c8j1"])
			target(t, "pgbench -S -c 8 -j 2 at least 1.3x kernel",
			       rps[t, "pgbench_S_c8"] >= 1.3 * rps["kernel", "pgbench_S_c8"])
			target(t, "pgbench -S -C at least kernel",
			       rps[t, "pgbench_S_C"] >= rps["kernel", "pgbench_S_C"])
		}
		if (t == "softib" || t == "ib") {
			# The RDMA datapath'"'"'s own, stricter targets.
			target(t, "p50 at -c 1 at most 1/5 of kernel (GET)",
			       p50[t, "GET c1"] > 0 && p50[t, "GET c1"] * 5 <= p50["kernel", "GET c1"])
			target(t, "throughput at -c 50 at least 2x kernel (SET and GET)",
			       rps[t, "SET c50"] >= 2 * rps["kernel", "SET c50"] && rps[t, "GET c50"] >= 2 * rps["kernel", "GET c50"])
		}
	}
}
function target(t, what, ok) { printf "  %-58s %s\n", what, ok ? "met" : "MISSED" }
' "$results"
if [ -s "$work/nginx_split" ]; then
	echo ""
	echo "nginx: connections each of its processes accepted over ferry, per run (FERRY_STATS"
	echo "streams_accepted, most first; the master is one of them and accepts none):"
	sed 's/^/  /' "$work/nginx_split"
fi
