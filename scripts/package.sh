#!/bin/sh
# Builds the Debian package from this tree's release tarball (make dist) in
# build/deb, as a fresh Debian 12 would (dpkg-buildpackage -b; the package's
# own build runs no test suite), then checks it without installing it here:
# lintian must report no error, apt must be able to install it, and unpacked
# into a scratch root its ferry-run must preload its own library, its man
# pages render without warnings, and it carries a redis-server over ferry.
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

root=$deb/root
dpkg -x "$pkg" "$root"
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
lib=/usr/lib/$triplet/ferry/libferry.so
for f in /usr/bin/ferry-run /usr/bin/ferry-doctor "$lib" /usr/share/man/man7/ferry.7.gz \
	/usr/share/man/man1/ferry-run.1.gz /usr/share/man/man1/ferry-doctor.1.gz \
	/usr/share/man/man1/ferry-stat.1.gz; do
	[ -e "$root$f" ] || die "$f is not in the package"
done
find "$root" -name '*.la' | grep . && die "the package holds a libtool archive"
said=$("$root/usr/bin/ferry-run" --print-lib)
[ "$said" = "$(printf '%s\tinstalled' "$lib")" ] || die "the packaged ferry-run --print-lib says '$said'"
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
say "$(basename "$pkg"): built, lintian clean of errors, installable, $(dpkg-deb -c "$pkg" | wc -l) entries"
