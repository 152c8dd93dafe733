#!/bin/sh
# xinetd, both ends preloaded: a fork and an exec per connection, the
# connection the exec'd service's stdin and stdout (cat here), the inetd
# model. Ten clients each send 200 KB and read it back, byte for byte, with
# no client falling back and every connection taken over by its service.
# Root only (xinetd's services run as a user it switches to).
# Usage: xinetd.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need cmp od
need_ferry
command -v xinetd >/dev/null || skip "xinetd is not installed"
[ "$(id -u)" = 0 ] || skip "xinetd's services need root"
tcpcat=$builddir/tests/integration/tcpcat
[ -x "$tcpcat" ] || skip "tcpcat not built"

port=$(free_port)
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

kill "$last_pid" 2>/dev/null
wait_exit "$last_pid" 10
check_transport client
counter_eq "client fallbacks" "$(stat_sum fallbacks client)" 0
counter_ge "clients' streams_connected" "$(stat_sum streams_connected client)" 10
counter_ge "services' streams_taken_over" "$(stat_sum streams_taken_over server)" 10
echo "PASS: xinetd over ferry ($transport)"
