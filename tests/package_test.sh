#!/usr/bin/env bash
# Builds the .deb packages (cpack) from a built tree, unpacks each into a
# temporary root, checks that every file lands where Debian keeps it (unit,
# conffile, libraries, headers, CMake package), that the maintainer scripts
# create the user and group, and that find_package(collectived) builds and
# runs a consumer against the unpacked root. Prints the packages and sizes.
#   package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d /tmp/collectived-package-XXXXXX)
trap 'rm -rf "$work"' EXIT
(cd "$build" && cpack -G DEB -B "$work/out" > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
mkdir -p "$work/root"
fail=0
echo "packages:"
for deb in "$work"/out/*.deb; do
  printf '  %-48s %8s KiB  Depends: %s\n' "$(basename "$deb")" "$(( $(stat -c %s "$deb") / 1024 ))" \
    "$(dpkg-deb -f "$deb" Depends)"
  dpkg-deb -x "$deb" "$work/root"
done
have() {  # every path must exist in the unpacked root
  for p in "$@"; do
    if [ ! -e "$work/root/$p" ] && [ ! -L "$work/root/$p" ]; then echo "FAIL: missing /$p"; fail=1; fi
  done
}
pkg() { ls "$work"/out/"$1"_*.deb 2> /dev/null | head -1; }
for name in collectived libcollectived-client libcollectived-dev; do
  [ -n "$(pkg "$name")" ] || { echo "FAIL: no $name package"; fail=1; }
done
have usr/bin/collectived usr/bin/collectivectl etc/collectived/collectived.toml \
  usr/lib/systemd/system/collectived.service usr/lib/systemd/system/nvidia-mps.service \
  usr/include/collectived/client.h usr/include/collectived/status.h \
  usr/lib/cmake/collectived/collectivedConfig.cmake usr/lib/cmake/collectived/collectivedTargets.cmake \
  usr/lib/libcollectived_client.so
ls "$work"/root/usr/lib/libcollectived_client.so.0* > /dev/null 2>&1 || { echo "FAIL: no libcollectived_client.so.0"; fail=1; }
if [ -n "$(pkg libcollectived-nccl)" ]; then
  have usr/lib/libcollectived_nccl.so usr/lib/collectived-nccl/libnccl.so.2 usr/include/collectived/nccl/nccl.h
  [ "$(readlink "$work/root/usr/lib/collectived-nccl/libnccl.so.2")" = "../libcollectived_nccl.so" ] ||
    { echo "FAIL: libnccl.so.2 is not a relative link to the library"; fail=1; }
fi
# Nothing of the daemon's package lands under /usr/etc, nothing of the libraries in the daemon's.
[ ! -e "$work/root/usr/etc" ] || { echo "FAIL: /usr/etc in a package"; fail=1; }
daemon=$(pkg collectived)
control=$work/control
dpkg-deb -e "$daemon" "$control"
grep -qx /etc/collectived/collectived.toml "$control/conffiles" || { echo "FAIL: the config is not a conffile"; fail=1; }
grep -q "addgroup --system collectived" "$control/postinst" || { echo "FAIL: postinst makes no group"; fail=1; }
grep -q "adduser --system" "$control/postinst" || { echo "FAIL: postinst makes no user"; fail=1; }
grep -q "deb-systemd-helper" "$control/postinst" || { echo "FAIL: postinst has no systemd steps"; fail=1; }
dpkg-deb -f "$daemon" Depends | grep -q adduser || { echo "FAIL: collectived does not depend on adduser"; fail=1; }
dpkg-deb -f "$(pkg libcollectived-dev)" Depends | grep -q libcollectived-client ||
  { echo "FAIL: libcollectived-dev does not depend on libcollectived-client"; fail=1; }
if dpkg-deb -c "$daemon" | grep -q "libcollectived_client"; then echo "FAIL: the client library in the daemon's package"; fail=1; fi
# find_package against the unpacked root: the CMake package is relocatable.
cmake -S "$src/tests/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/root/usr" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
LD_LIBRARY_PATH="$work/root/usr/lib" "$work/consumer/consumer" || { echo "FAIL: the consumer did not run"; fail=1; }
[ "$fail" -eq 0 ] && echo "PASS: packages unpack where they belong and find_package(collectived) works against them"
exit $fail
