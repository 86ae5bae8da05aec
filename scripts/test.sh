#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with CTest.
# Exits non-zero if any step or any test fails.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FEDMESH_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$@"
cd "$build"
# Unit tests run two at a time; the training runs (node_tests, each using both cores)
# are marked RUN_SERIAL in CMakeLists.txt so they never share the machine.
ctest --output-on-failure -j "${FEDMESH_TEST_JOBS:-2}" --timeout 1200
