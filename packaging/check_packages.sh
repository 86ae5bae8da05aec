#!/usr/bin/env bash
# Builds the three .deb packages from BUILD_DIR with CPack into a scratch folder and checks
# them: names, declared Debian dependencies, the files each carries, the postinst, and
# (when systemd-analyze is here) that the template units verify once instantiated.
# Usage: packaging/check_packages.sh BUILD_DIR     (CTest: packaging.debs)
set -euo pipefail
build=$(cd "$1" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
(cd "$build" && cpack -G DEB -B "$out" >"$out/cpack.log" 2>&1) || { cat "$out/cpack.log"; exit 1; }
fail() { echo "FAIL: $*" >&2; exit 1; }
for pkg in node aggregator tools; do
  deb=$(ls "$out"/fedmesh-${pkg}_*.deb 2>/dev/null) || fail "no fedmesh-$pkg package"
  [[ $(dpkg-deb --field "$deb" Package) == "fedmesh-$pkg" ]] || fail "$deb: wrong Package"
  depends=$(dpkg-deb --field "$deb" Depends)
  for lib in libc6 libsodium23 libsqlite3-0 libprotobuf32; do
    [[ $depends == *"$lib"* ]] || fail "fedmesh-$pkg does not depend on $lib: $depends"
  done
  dpkg-deb -x "$deb" "$out/root-$pkg"
  echo "fedmesh-$pkg: $(dpkg-deb --field "$deb" Version), depends on $(tr ',' '\n' <<<"$depends" | wc -l) packages"
done
for b in fedmesh-node:node fedmesh-aggregator:aggregator fedmesh-keys:tools fedmesh-provision:tools fedmesh-admin:tools fedmesh-model:tools fedmesh-psi:tools fedmesh-sim:tools; do
  [[ -x "$out/root-${b#*:}/usr/bin/${b%:*}" ]] || fail "${b%:*} is not in fedmesh-${b#*:}"
done
depends=$(dpkg-deb --field "$out"/fedmesh-aggregator_*.deb Depends)
[[ $depends == *libcpp-httplib* ]] || fail "fedmesh-aggregator (its status page) does not depend on libcpp-httplib: $depends"
for pkg in node aggregator; do
  [[ $(dpkg-deb --field "$out"/fedmesh-${pkg}_*.deb Depends) == *libzmq5* ]] || fail "fedmesh-$pkg: no libzmq5"
  dpkg-deb -e "$out"/fedmesh-${pkg}_*.deb "$out/control-$pkg"
  grep -q "adduser --system" "$out/control-$pkg/postinst" || fail "fedmesh-$pkg: postinst does not add the user"
  unit="$out/root-$pkg/usr/lib/systemd/system/fedmesh-$pkg@.service"
  [[ -f $unit ]] || fail "fedmesh-$pkg: no systemd unit"
  for line in "User=fedmesh" "ProtectSystem=strict" "NoNewPrivileges=true" "PrivateTmp=true" "StateDirectory=fedmesh/%i"; do
    grep -qx "$line" "$unit" || fail "$unit lacks $line"
  done
  if command -v systemd-analyze >/dev/null; then
    # An instance, with ExecStart pointing into the extracted package.
    sed "s|/usr/bin/|$out/root-$pkg/usr/bin/|g" "$unit" >"$out/fedmesh-$pkg@site.service"
    systemd-analyze verify "$out/fedmesh-$pkg@site.service" || fail "systemd-analyze verify fedmesh-$pkg@site.service"
  fi
done
echo "packages OK"
