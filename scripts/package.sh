#!/bin/sh
# Builds the Debian package from this tree's release tarball (make dist) in
# build/deb, as a fresh Debian 12 would (dpkg-buildpackage -b; the package's
# own build runs no test suite), then checks it without installing it here:
# lintian must report no error, apt must be able to install it, and installed
# into a scratch root its ferry-run must preload its own library, man must
# find ferry(7), the pages render without warnings, it carries a redis-server
# over ferry, and a purge leaves nothing behind.
# Usage: package.sh [BUILD-DIR]   (a configured build, build/plain by default)
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/build/plain}" && pwd)
deb=$top/build/deb
say() { echo "package.sh: $*"; }
die() { echo "package.sh: $*" >&2; exit 1; }

rm -rf "$deb"
mkdir -p "$deb"
make -s -C "$build" dist-gzip >/dev/null
version=$(sed -n 's/^PACKAGE_VERSION = //p' "$build/Makefile")
tar -xzf "$build/ferry-$version.tar.gz" -C "$deb"
say "dpkg-buildpackage -b -uc -us (log: $deb/build.log)"
(cd "$deb/ferry-$version" &&
	DEB_BUILD_OPTIONS="nocheck parallel=$(nproc 2>/dev/null || echo 2)" \
		dpkg-buildpackage -b -uc -us) >"$deb/build.log" 2>&1 ||
	{ tail -40 "$deb/build.log"; die "dpkg-buildpackage failed"; }
pkg=$(ls "$deb"/ferry_*.deb)
changes=$(ls "$deb"/ferry_*.changes)

# Errors fail; warnings are shown for whoever reads the log.
lintian_rc=0
lintian --fail-on error "$changes" >"$deb/lintian.log" 2>&1 || lintian_rc=$?
grep -v '^running with root' "$deb/lintian.log" || true
[ $lintian_rc = 0 ] || die "lintian reports errors (exit status $lintian_rc)"
say "lintian: $(grep -c '^E:' "$deb/lintian.log" || true) errors, $(grep -c '^W:' "$deb/lintian.log" || true) warnings"
apt-get install -s -q "$pkg" >"$deb/apt.log" 2>&1 || { cat "$deb/apt.log"; die "apt cannot install $pkg"; }

# Installed for real, but into a scratch root with a database of its own:
# its dependencies are the host's (apt -s resolved them above).
root=$deb/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
: >"$root/var/lib/dpkg/status"
dpkg --root="$root" --force-depends -i "$pkg" >"$deb/dpkg.log" 2>&1 ||
	{ cat "$deb/dpkg.log"; die "dpkg --root -i failed"; }
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
lib=/usr/lib/$triplet/ferry/libferry.so
for f in /usr/bin/ferry-run /usr/bin/ferry-doctor /usr/bin/ferry-stat "$lib" /usr/share/man/man7/ferry.7.gz \
	/usr/share/man/man1/ferry-run.1.gz /usr/share/man/man1/ferry-doctor.1.gz \
	/usr/share/man/man1/ferry-stat.1.gz; do
	[ -e "$root$f" ] || die "$f is not in the package"
done
find "$root" -name '*.la' | grep . && die "the package holds a libtool archive"
said=$("$root/usr/bin/ferry-run" --print-lib)
[ "$said" = "$(printf '%s\tinstalled' "$lib")" ] || die "the packaged ferry-run --print-lib says '$said'"
# The packaged ferry-stat sees a process the packaged library runs.
"$root/usr/bin/ferry-run" --lib "$root$lib" python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); print(s.getsockname()[1], flush=True)
time.sleep(30)' >"$deb/listen.out" 2>&1 &
listener=$!
i=0
until [ -s "$deb/listen.out" ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
"$root/usr/bin/ferry-stat" -p "$listener" >"$deb/stat.out" 2>&1
rc=$?
kill "$listener" 2>/dev/null
wait "$listener" 2>/dev/null || true # it ends by the SIGTERM: status 143, not a failure
[ $rc -eq 0 ] && grep -q "127.0.0.1:$(head -1 "$deb/listen.out") " "$deb/stat.out" ||
	{ cat "$deb/listen.out" "$deb/stat.out"; die "the packaged ferry-stat does not show a ferry listener"; }
[ "$(MANPATH=$root/usr/share/man man -w ferry)" = "$root/usr/share/man/man7/ferry.7.gz" ] ||
	die "man ferry does not find ferry(7)"
for page in "$root"/usr/share/man/man*/ferry*; do
	LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$page" 2>&1 >/dev/null |
		grep . && die "${page##*/} renders with warnings"
done

# The packaged library at work (from the scratch root: FERRY_LIB).
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
	port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 30000))
	export FERRY_LIB="$root$lib"
	"$root/usr/bin/ferry-run" --stats "$deb/server.json" redis-server --port "$port" \
		--bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$deb/redis.log" 2>&1 &
	server=$!
	i=0
	until redis-cli -p "$port" PING >/dev/null 2>&1 || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
	r=$(timeout 30 "$root/usr/bin/ferry-run" redis-cli -p "$port" PING) || r=failed
	kill -TERM "$server"
	wait "$server" || true
	unset FERRY_LIB
	[ "$r" = PONG ] || die "redis-cli through the packaged ferry-run: $r"
	grep -q '"streams_accepted":[1-9]' "$deb/server.json" ||
		die "the packaged library carried nothing: $(cat "$deb/server.json" 2>/dev/null)"
	say "redis over the packaged library: PONG, $(grep -o '"streams_accepted":[0-9]*' "$deb/server.json")"
fi
dpkg --root="$root" --force-depends --purge ferry >>"$deb/dpkg.log" 2>&1 || die "dpkg --purge failed"
left=$(find "$root" ! -type d ! -path "$root/var/lib/dpkg/*")
[ -z "$left" ] || die "the purge left $left"
say "$(basename "$pkg"): built, lintian clean of errors, installs, works and purges cleanly"
