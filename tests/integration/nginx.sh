#!/bin/sh
# nginx as it ships (a master and worker processes), preloaded, with curl and
# wrk preloaded: 2 and 4 workers, accept_mutex off (nginx's default) and on,
# and per-worker listeners (listen ... reuseport). curl's bytes must match the
# file; wrk must see no error; the counters must show the workers carried
# every connection (the master accepts none) with no fallback. The reload is
# nginx_reload.sh. Usage: nginx.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need nginx curl wrk ss cmp
need_ferry
need_sanitizer_ok "nginx -v" "curl --version"

head -c 1024 /dev/urandom >"$work/k1"
mkdir -p "$work/html" "$work/logs" && mv "$work/k1" "$work/html/k1"
user=$(id -un)

# conf WORKERS MUTEX LISTEN-OPTIONS
conf() {
	cat >"$work/nginx.conf" <<EOC
daemon off;
master_process on;
worker_processes $1;
$([ "$(id -u)" = 0 ] && echo "user $user;")
error_log $work/logs/error.log warn;
pid $work/logs/nginx.pid;
events { worker_connections 1024; accept_mutex $2; }
http {
	access_log off;
	client_body_temp_path $work/logs;
	proxy_temp_path $work/logs;
	fastcgi_temp_path $work/logs;
	uwsgi_temp_path $work/logs;
	scgi_temp_path $work/logs;
	server { listen 127.0.0.1:$port $3; root $work/html; }
}
EOC
}

# run NAME WORKERS MUTEX LISTEN-OPTIONS
run() {
	name=$1
	port=$(free_port)
	conf "$2" "$3" "$4"
	bgf "$name" nginx -c "$work/nginx.conf" -p "$work"
	master=$last_pid
	wait_listen "$port"
	for i in 1 2 3; do
		timeout 20 "$ferry_run" --transport "$transport" --stats "$work/stats-c$name-%p.json" \
			curl -sS -o "$work/got" "http://127.0.0.1:$port/k1" 2>"$work/curl.err" ||
			fail "$name: curl: $(cat "$work/curl.err")"
		cmp -s "$work/got" "$work/html/k1" || fail "$name: curl got other bytes"
	done
	timeout 30 "$ferry_run" --transport "$transport" --stats "$work/stats-c$name-%p.json" \
		wrk -t 2 -c 50 -d 2 "http://127.0.0.1:$port/k1" >"$work/wrk.log" 2>&1 ||
		fail "$name: wrk failed: $(tail -3 "$work/wrk.log")"
	grep -q 'Socket errors\|Non-2xx' "$work/wrk.log" && fail "$name: wrk: $(grep 'errors\|Non-2xx' "$work/wrk.log")"
	reqs=$(awk '/requests in/ {print $1}' "$work/wrk.log")
	expect_ge "$name: wrk requests" "${reqs:-0}" 1000
	kill -QUIT "$master"
	wait_exit "$master" 20 || fail "$name: nginx did not stop cleanly"
	check_transport "$name"
	counter_eq "$name: server fallbacks+kernel_accepts" \
		$(($(stat_sum fallbacks "$name") + $(stat_sum kernel_accepts "$name"))) 0
	counter_eq "$name: client fallbacks" "$(stat_sum fallbacks "c$name")" 0
	counter_ge "$name: workers' streams_accepted" "$(stat_sum streams_accepted "$name")" 53
	if counting; then
		workers=$(grep -l '"streams_accepted":[1-9]' "$work"/stats-"$name"-*.json | wc -l)
		expect_ge "$name: processes that accepted" "$workers" 1
		grep -q '"streams_accepted":[1-9]' "$work/stats-$name-$(basename "$master").json" 2>/dev/null &&
			fail "$name: the master accepted connections"
	fi
	log "$name: $2 workers, accept_mutex $3${4:+, $4}: curl byte for byte, wrk $reqs requests, no error"
}

run w2 2 off ""
run w4 4 off ""
run mutex 2 on ""
run reuseport 2 off reuseport

# The worker serving wrk killed (SIGKILL) in the middle of requests: its
# clients' requests fail as over the kernel, at most one per connection,
# nothing hangs, and new clients are served at once, byte for byte, by the
# other worker (well within the 10 s failure timeout).
port=$(free_port)
conf 2 off ""
bgf killed nginx -c "$work/nginx.conf" -p "$work"
master=$last_pid
wait_listen "$port"
timeout 30 "$ferry_run" --transport "$transport" --stats "$work/stats-ckilled-%p.json" \
	wrk -t 1 -c 20 -d 3 "http://127.0.0.1:$port/k1" >"$work/wrk.log" 2>&1 &
bench=$!
sleep 1
# The busiest worker: the one wrk's connections reached.
victim=$(for w in $(pgrep -P "$master"); do
	echo "$(awk '{print $14 + $15}' "/proc/$w/stat") $w"
done | sort -n | tail -1 | cut -d' ' -f2)
[ -n "$victim" ] || fail "killed: no worker to kill"
kill -KILL "$victim"
for i in 1 2 3; do
	timeout 5 "$ferry_run" --transport "$transport" curl -sS -o "$work/got" \
		"http://127.0.0.1:$port/k1" 2>"$work/curl.err" ||
		fail "killed: curl right after the kill: $(cat "$work/curl.err")"
	cmp -s "$work/got" "$work/html/k1" || fail "killed: curl got other bytes"
done
wait "$bench" || fail "killed: wrk failed or hung: $(tail -3 "$work/wrk.log")"
reqs=$(awk '/requests in/ {print $1}' "$work/wrk.log")
expect_ge "killed: wrk requests" "${reqs:-0}" 1000
errors=$(sed -n 's/.*Socket errors: connect \([0-9]*\), read \([0-9]*\), write \([0-9]*\), timeout \([0-9]*\).*/\1 \2 \3 \4/p' \
	"$work/wrk.log" | awk '{print $1 + $2 + $3 + $4}')
# At most one failed request per connection: those the killed worker held.
expect_le "killed: failed requests" "${errors:-0}" 20
kill -QUIT "$master"
wait_exit "$master" 20 || fail "killed: nginx did not stop cleanly"
log "killed: a worker SIGKILLed under wrk -c 20: ${errors:-0} failed requests, $reqs answered, the rest served on"

echo "PASS: nginx over ferry ($transport)"
