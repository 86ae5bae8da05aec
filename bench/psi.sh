#!/usr/bin/env bash
# ECDH-PSI at scale: two parties with 1M ids each, 50% overlap, over CurveZMQ on loopback,
# beside the floor of 2 scalar multiplications per id measured in the same run
# (bench/psi.cc). Usage: bench/psi.sh [BUILD_DIR] [IDS]
set -euo pipefail
build=${1:-build}
ids=${2:-1000000}
cmake --build "$build" --target fedmesh_psi_bench -j2 >/dev/null
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%F)"
"$build/bench/fedmesh_psi_bench" --ids "$ids" --overlap 0.5
