#!/usr/bin/env bash
# Configures and builds fedmesh into ${FEDMESH_BUILD_DIR:-build} (Release).
# Extra arguments go to CMake's configure step, e.g. -DFEDMESH_CUDA=OFF.
# FEDMESH_TARGETS limits the build to those targets (default: everything).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FEDMESH_BUILD_DIR:-$root/build}
jobs=${FEDMESH_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${FEDMESH_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
