#!/bin/sh
# xinetd, both ends preloaded: a fork and an exec per connection, the
# connection the exec'd service's stdin and stdout, the inetd model. Ten
# clients each send 200 KB through cat and read it back, byte for byte, and
# five talk to a service written with stdio (stdioline: fgets and printf,
# which glibc does through calls of its own, stdfile.h), with no client
# falling back and every connection taken over by its service. Root only
# (xinetd's services run as a user it switches to).
# Usage: xinetd.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need cmp od
need_ferry
command -v xinetd >/dev/null || skip "xinetd is not installed"
[ "$(id -u)" = 0 ] || skip "xinetd's services need root"
tcpcat=$builddir/tests/integration/tcpcat
[ -x "$tcpcat" ] || skip "tcpcat not built"
stdioline=$builddir/tests/integration/stdioline
[ -x "$stdioline" ] || skip "stdioline not built"

port=$(free_port)
sport=$(free_port)
cat >"$work/xinetd.conf" <<EOF2
service ferry-echo
{
	type = UNLISTED
	port = $port
	bind = 127.0.0.1
	socket_type = stream
	protocol = tcp
	wait = no
	user = root
	server = /bin/cat
	instances = 50
}
service ferry-stdio
{
	type = UNLISTED
	port = $sport
	bind = 127.0.0.1
	socket_type = stream
	protocol = tcp
	wait = no
	user = root
	server = $stdioline
	instances = 50
}
EOF2
bgf server xinetd -dontfork -f "$work/xinetd.conf" -pidfile "$work/xinetd.pid"
wait_listen "$port"

head -c 200000 /dev/urandom >"$work/in"
n=0
while [ $n -lt 10 ]; do
	n=$((n + 1))
	tcpcat_echo "client $n" "$port" "client$n"
done
log "10 clients, 200 KB each through cat, byte for byte"

wait_listen "$sport"
printf 'one\ntwo\nthree\n' >"$work/lines"
printf 'got: one\ngot: two\ngot: three\n' >"$work/want"
n=0
while [ $n -lt 5 ]; do
	n=$((n + 1))
	timeout 60 "$ferry_run" --transport "$transport" --stats "$work/stats-client$n-%p.json" \
		"$tcpcat" 127.0.0.1 "$sport" <"$work/lines" >"$work/got" 2>"$work/cli.err" ||
		fail "stdio client $n: tcpcat failed: $(cat "$work/cli.err")"
	cmp -s "$work/want" "$work/got" ||
		fail "stdio client $n: the service answered '$(tr '\n' '|' <"$work/got")'"
done
log "5 clients of the stdio service, 3 lines each answered"

kill "$last_pid" 2>/dev/null
wait_exit "$last_pid" 10
check_transport client
counter_eq "client fallbacks" "$(stat_sum fallbacks client)" 0
counter_ge "clients' streams_connected" "$(stat_sum streams_connected client)" 15
counter_ge "services' streams_taken_over" "$(stat_sum streams_taken_over server)" 15
echo "PASS: xinetd over ferry ($transport)"
