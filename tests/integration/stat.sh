#!/bin/sh
# ferry-stat shows what runs: a redis-server's listener and the streams of
# clients holding connections (text, --json, -p), a listener whose opens
# nobody accepts with its queue, and no entry for a process that is gone.
# Usage: stat.sh [TRANSPORT]
. "$(dirname "$0")/lib.sh"
need redis-server python3 ss
need_ferry
counting || skip "ferry-stat shows ferry processes only"
stat=$builddir/ferry-stat
hold=$builddir/tests/integration/connhold
[ -x "$stat" ] || fail "$stat not built"
[ -x "$hold" ] || fail "$hold not built"
conns=3

port=$(free_port)
bgf server redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$work" --protected-mode no --daemonize no
server=$last_pid
wait_listen "$port"
bgf hold "$hold" "$port" "$conns"
holder=$last_pid
wait_line hold ready "$holder"

"$stat" >"$work/view.txt" || fail "ferry-stat failed"
cat "$work/view.txt"
grep -q "^redis-server pid $server, $transport" "$work/view.txt" || fail "redis-server is not shown"
grep -q "^connhold pid $holder, $transport" "$work/view.txt" || fail "connhold is not shown"
grep -q "^  127\.0\.0\.1:$port  *0 .* $server\$" "$work/view.txt" ||
	fail "redis-server's listener is not shown with its holder"
served=$(grep -c "^  127\.0\.0\.1:$port  *127\.0\.0\.1:[0-9]*  *open .* $server\$" "$work/view.txt")
expect_eq "redis-server's client streams shown" "$served" "$conns"
held=$(grep -c "^  127\.0\.0\.1:[0-9]*  *127\.0\.0\.1:$port  *open .* $holder\$" "$work/view.txt")
expect_eq "connhold's streams shown" "$held" "$conns"

# --json is one valid document with the same listener and streams.
"$stat" --json >"$work/view.json" || fail "ferry-stat --json failed"
python3 -m json.tool "$work/view.json" >/dev/null || fail "ferry-stat --json is not JSON"
python3 - "$work/view.json" "$server" "$port" "$conns" <<'PY' || fail "the JSON view lacks redis-server's listener or streams"
import json, sys
doc = json.load(open(sys.argv[1]))
pid, port, conns = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
p = [p for p in doc["processes"] if p["pid"] == pid][0]
assert p["tables"] == "current", p["tables"]
assert any(l["address"] == "127.0.0.1:" + port and pid in l["holders"] for l in p["listeners"])
assert sum(s["local"] == "127.0.0.1:" + port and s["state"] == "open" for s in p["streams"]) == conns
assert p["counters"]["streams_accepted"] >= conns
PY
log "--json: valid, with the listener and $conns streams"

# -p picks one process; a process that is not ferry's is an error (1).
"$stat" -p "$server" >"$work/one.txt" || fail "ferry-stat -p $server failed"
expect_eq "processes shown by -p" "$(grep -c ' pid [0-9]*, ' "$work/one.txt")" 1
grep -q "^redis-server pid $server," "$work/one.txt" || fail "-p showed another process"
"$stat" -p $$ >/dev/null 2>&1
expect_eq "ferry-stat -p of a shell (exit status)" $? 1
"$stat" --bogus >/dev/null 2>&1
expect_eq "ferry-stat with a bad option (exit status)" $? 2

# A listener nobody accepts on: the opens wait in its queue, shown.
lport=$(free_port)
cat >"$work/noaccept.py" <<'PY'
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
print("listening", flush=True)
time.sleep(600)
PY
cat >"$work/opens.py" <<'PY'
import socket, sys, time
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(int(sys.argv[2]))]
print("connected", flush=True)
time.sleep(600)
PY
bgf noaccept python3 "$work/noaccept.py" "$lport"
idle=$last_pid
wait_listen "$lport"
bgf opens python3 "$work/opens.py" "$lport" 4
opener=$last_pid
wait_line opens connected "$opener"
"$stat" -p "$idle" >"$work/queue.txt" || fail "ferry-stat -p $idle failed"
cat "$work/queue.txt"
queued=$(sed -n "s/^  127\.0\.0\.1:$lport  *\([0-9][0-9]*\) .*/\1/p" "$work/queue.txt")
expect_eq "opens queued, not accepted" "$queued" 4
expect_eq "streams shown as queued" "$(grep -c "^  127\.0\.0\.1:$lport .* queued " "$work/queue.txt")" 4

# Each new ferry process sweeps the files of dead ones, but one sweep in 10 s
# serves all of our user's (a fork-per-connection server starts ferry once
# per connection): a sweep leaves a mark, and a mark that young stops the next.
mark=/dev/shm/ferry-swept.$(id -u)
sh -c 'exit 0' &
gone=$!
wait "$gone"
stale=/dev/shm/ferry-stat.$(id -u).$gone
: >"$stale"
touch -d '-60 seconds' "$mark" || fail "cannot age the sweep mark"
ferry_cmd sweep redis-cli -p "$port" PING >/dev/null || fail "redis-cli through ferry-run failed"
[ -e "$stale" ] && fail "a process that started after an old mark did not sweep"
[ -f "$mark" ] || fail "a sweep left no mark"
: >"$stale"
ferry_cmd sweep redis-cli -p "$port" PING >/dev/null || fail "redis-cli through ferry-run failed"
[ -e "$stale" ] || fail "a process swept though another had just swept"
rm -f "$stale"
log "sweeps: one in 10 s for all of the user's processes"

# Gone processes leave nothing behind, killed or not.
kill -TERM "$holder"
kill -KILL "$opener"
wait "$holder" 2>/dev/null
wait "$opener" 2>/dev/null
"$stat" >"$work/after.txt" || fail "ferry-stat failed"
grep -q " pid $holder," "$work/after.txt" && fail "connhold is still shown after it exited"
grep -q " pid $opener," "$work/after.txt" && fail "a SIGKILLed process is still shown"
[ -e "/dev/shm/ferry-stat.$(id -u).$opener" ] && fail "the SIGKILLed process's file is left"
log "exited processes: not shown, their files gone"
echo "PASS: ferry-stat shows listeners, streams, queued opens, JSON and -p ($transport)"
