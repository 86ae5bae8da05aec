#!/usr/bin/env bash
# Split training (bench/split_training.cc): Fashion-MNIST left|right halves against an uncut
# mlp trained centrally on the same rows, then pipelining over a link with 20 ms one-way
# delay (a transport wrapper: this kernel has no sch_netem) at two model sizes. One compute
# thread per party (two parties on two cores). Usage: bench/split_training.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
cmake --build "$build" --target fedmesh_split_training -j2 >/dev/null
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%F)"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$build/bench/fedmesh_split_training" --mode accuracy --epochs 5 --batch 64 --microbatches 4 | grep -v "^  "
for size in "--hidden 1024 --label-hidden 1024 --batch 1024" "--hidden 4096 --label-hidden 4096 --batch 2048"; do
  echo "== $size"
  # shellcheck disable=SC2086
  "$build/bench/fedmesh_split_training" --mode pipeline --rows 30000 --steps 8 --delay-ms 20 --microbatches 4 $size
done
