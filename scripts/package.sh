#!/usr/bin/env bash
# Builds the Debian packages fedmesh-node, fedmesh-aggregator and fedmesh-tools
# (packaging/packaging.cmake) from a CPU-only Release build in build-pkg/ (CUDA off: the
# CUDA runtime is not a Debian package the packages could depend on), then shows each
# package's name and dependencies. Environment: FEDMESH_PKG_BUILD_DIR (build-pkg).
#   scripts/package.sh && dpkg -i build-pkg/fedmesh-*.deb
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FEDMESH_PKG_BUILD_DIR:-$root/build-pkg}
"$root/scripts/setup.sh"
FEDMESH_BUILD_DIR=$build \
  FEDMESH_TARGETS="fedmesh-node fedmesh-aggregator fedmesh-keys fedmesh-provision fedmesh-admin fedmesh-model fedmesh-sim" \
  "$root/scripts/build.sh" -DFEDMESH_CUDA=OFF -DFEDMESH_BUILD_TESTS=OFF -DFEDMESH_BUILD_BENCH=OFF
rm -f "$build"/fedmesh-*.deb
(cd "$build" && cpack -G DEB >/dev/null)
for deb in "$build"/fedmesh-*.deb; do
  echo "== $deb"
  dpkg-deb --field "$deb" Package Version Depends
done
