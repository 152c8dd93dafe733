#!/bin/sh
# postgres, a process per connection: the postmaster accepts and forks a
# backend, which serves the connection. Server and pgbench preloaded:
# pgbench -i, -S with 4 clients, and -S -C (a new connection, so a new
# backend, for every transaction), no transaction failing; the backends'
# counters must show they took their connections over from the postmaster
# and carried them, with no fallback. Runs as the postgres user (initdb into
# a scratch directory). Usage: postgres.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need pgbench ss su
need_ferry
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$pgbin" ] && [ -x "$pgbin/initdb" ] || skip "postgresql is not installed"
[ "$(id -u)" = 0 ] || skip "needs root to run postgres as its own user"
id postgres >/dev/null 2>&1 || skip "no postgres user"
need_sanitizer_ok "pgbench --version" "$pgbin/postgres --version"
# A postmaster that never came up (or outlived a failure) goes with the test.
trap 'rc=$?; pkill -KILL -u postgres -f "$work/data" 2>/dev/null; (exit $rc); cleanup' EXIT

chmod 777 "$work"
port=$(free_port)
as_pg() { su postgres -s /bin/sh -c "$*"; }
as_pg "'$pgbin/initdb' -D '$work/data' -A trust -U postgres >'$work/initdb.log' 2>&1" ||
	fail "initdb: $(tail -3 "$work/initdb.log")"
lib_opts="--transport $transport --stats $work/stats-server-%p.json"
counting || lib_opts=
# The server's stats files are written by the postgres user.
as_pg "exec '$ferry_run' $lib_opts '$pgbin/postgres' -D '$work/data' -k '$work' -p $port \
	-c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=40 >'$work/server.log' 2>&1" &
postmaster=$!
pids="$pids $postmaster"
wait_listen "$port"
# Listening is not ready: a client that comes while the startup process
# still runs is told "the database system is starting up", kernel or not.
# The probe asks over the unix socket, so no TCP connection of its own
# (one racing the listener's rendezvous may rightly fall back) counts.
i=0
until as_pg "pg_isready -q -h '$work' -p $port -U postgres"; do
	i=$((i + 1))
	[ $i -lt 100 ] || fail "postgres not ready after 20 s: $(tail -3 "$work/server.log")"
	sleep 0.2
done
# pgbench runs as postgres too: softib's fabric is one user's (doc/softib.md).
pg() { # NAME pgbench args...
	_n=$1
	shift
	_opts="--transport $transport --stats $work/stats-$_n-%p.json"
	counting || _opts=
	as_pg "exec timeout 120 '$ferry_run' $_opts pgbench -h 127.0.0.1 -p $port -U postgres $* \
		postgres >'$work/$_n.log' 2>&1" || fail "pgbench $*: $(tail -3 "$work/$_n.log")"
}
pg init -i -s 1 -q
log "pgbench -i: done"
pg select -S -c 4 -j 2 -T 3
pg connect -S -C -c 2 -j 2 -T 3
for n in select connect; do
	tps=$(sed -n 's/^tps = \([0-9]*\).*/\1/p' "$work/$n.log" | head -1)
	failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$work/$n.log")
	expect_ge "$n: tps" "${tps:-0}" 10
	expect_eq "$n: failed transactions" "${failed:-0}" 0
done
as_pg "'$pgbin/pg_ctl' -D '$work/data' stop -m fast >'$work/stop.log' 2>&1" || fail "pg_ctl stop failed"
# pg_ctl returns once the pid file is gone; the counters are written at the
# postmaster's exit, after that.
wait "$postmaster"
check_transport server
counter_eq "server fallbacks+kernel_accepts" \
	$(($(stat_sum fallbacks server) + $(stat_sum kernel_accepts server))) 0
counter_eq "client fallbacks" \
	$(($(stat_sum fallbacks init) + $(stat_sum fallbacks select) + $(stat_sum fallbacks connect))) 0
conns=$(grep -o 'number of transactions actually processed: [0-9]*' "$work/connect.log" | grep -o '[0-9]*$')
counter_ge "connections the postmaster accepted" "$(stat_sum streams_accepted server)" $((${conns:-0} + 4))
counter_ge "connections backends took over" "$(stat_sum streams_taken_over server)" $((${conns:-0} + 4))
echo "PASS: postgres over ferry ($transport)"
