#!/usr/bin/env bash
# Payload digest throughput on one core: BLAKE3 with each lane kernel against SHA-256 with
# and without the SHA extensions, and memcpy (bench/RESULTS.md, "BLAKE3 payload digests").
# Usage: bench/digest_throughput.sh [build dir]   (a Release build with the bench targets)
set -euo pipefail
build=${1:-build}
bin=$build/bench/fedmesh_digest_throughput
[[ -x $bin ]] || { echo "$bin not built (cmake --build $build --target fedmesh_digest_throughput)" >&2; exit 2; }
"$bin"
FEDMESH_BLAKE3_KERNEL=avx2 FEDMESH_SHA256_PORTABLE=1 "$bin"
FEDMESH_BLAKE3_KERNEL=portable "$bin"
