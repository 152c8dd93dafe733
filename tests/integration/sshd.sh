#!/bin/sh
# OpenSSH's sshd, both ends preloaded: the listener re-execs itself for
# each connection, whose pre-authentication child confines itself
# (RLIMIT_NOFILE 1, a seccomp filter) and so reaches the connection through a
# relay; after authentication the session runs in the monitor, whose command
# child reads the connection's addresses and must leave it there. A command's
# output, 1 MB through cat byte for byte and ten logins, with no client
# falling back. Root only (sshd's privilege separation). Usage: sshd.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need ssh ssh-keygen cmp od
need_ferry
sshd=/usr/sbin/sshd
[ -x "$sshd" ] || skip "openssh-server is not installed"
[ "$(id -u)" = 0 ] || skip "sshd's privilege separation needs root"
id sshd >/dev/null 2>&1 || skip "no sshd user"
need_sanitizer_ok "ssh -V"
mkdir -p /run/sshd

ssh-keygen -q -t ed25519 -N "" -f "$work/host" || fail "ssh-keygen"
ssh-keygen -q -t ed25519 -N "" -f "$work/client" || fail "ssh-keygen"
cp "$work/client.pub" "$work/authorized_keys"
port=$(free_port)
cat >"$work/sshd_config" <<EOF
HostKey $work/host
PidFile $work/sshd.pid
AuthorizedKeysFile $work/authorized_keys
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
ListenAddress 127.0.0.1
Port $port
EOF
bgf server "$sshd" -D -e -f "$work/sshd_config"
wait_listen "$port"

i=0
ssh_run() { # CMD: runs CMD over ssh, preloaded; stdin from the caller
	i=$((i + 1))
	timeout 60 "$ferry_run" --transport "$transport" --stats "$work/stats-client$i-%p.json" \
		ssh -i "$work/client" -p "$port" -o StrictHostKeyChecking=no \
		-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes \
		root@127.0.0.1 "$1"
}

out=$(ssh_run 'echo hello from $SSH_CONNECTION' </dev/null 2>"$work/cli.err") ||
	fail "ssh echo: $(cat "$work/cli.err")"
case $out in
"hello from 127.0.0.1 "*" 127.0.0.1 $port") ;;
*) fail "ssh echo said '$out'" ;;
esac
log "a command's output, with the addresses sshd saw: $out"

head -c 1000000 /dev/urandom >"$work/in"
ssh_run cat <"$work/in" >"$work/out" 2>"$work/cli.err" || fail "ssh cat: $(cat "$work/cli.err")"
cmp -s "$work/in" "$work/out" || fail "1 MB through cat: $(wc -c <"$work/out") came back, or other bytes"
log "1 MB through cat, byte for byte"

n=0
while [ $n -lt 10 ]; do
	ssh_run true </dev/null 2>"$work/cli.err" || fail "login $((n + 1)): $(cat "$work/cli.err")"
	n=$((n + 1))
done
log "10 logins"

kill "$last_pid" 2>/dev/null
check_transport client
counter_eq "client fallbacks" "$(stat_sum fallbacks client)" 0
counter_ge "clients' streams_connected" "$(stat_sum streams_connected client)" 12
echo "PASS: sshd over ferry ($transport)"
