#!/usr/bin/env bash
# Builds every test with AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/ and
# runs them. Not part of CI (about 4x slower); run it before landing changes to code that
# indexes buffers. Extra arguments go to ctest, e.g. -R RoundEngine.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FEDMESH_BUILD_DIR:-$root/build-asan}
FEDMESH_BUILD_DIR=$build "$root/scripts/build.sh" -DFEDMESH_SANITIZE=address,undefined \
    -DFEDMESH_CUDA=OFF -DFEDMESH_BUILD_BENCH=OFF
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build" && ctest -j "${FEDMESH_JOBS:-$(nproc)}" --timeout 2400 --output-on-failure "$@"
