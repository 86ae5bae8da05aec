#!/usr/bin/env bash
# Everything the GPU issue asks to run on a GPU, in one command, on a Debian machine with an
# NVIDIA GPU and the CUDA toolkit in /usr/local/cuda: installs what is missing, builds with
# CUDA (Release, build-gpu/), runs every GPU test (they skip on machines without a GPU, so
# CI never runs them), then the two GPU benchmarks. Logs go to OUT (runs/gpu).
#   bench/gpu_check.sh
# Environment: BUILD (build-gpu), OUT (runs/gpu), JOBS (nproc).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build-gpu}
out=${OUT:-$root/runs/gpu}
jobs=${JOBS:-$(nproc)}
mkdir -p "$out"
nvidia-smi -L | tee "$out/device.txt"
FEDMESH_SETUP_BENCH=1 "$root/scripts/setup.sh" >/dev/null
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DFEDMESH_CUDA=ON >"$out/cmake.log"
cmake --build "$build" -j"$jobs" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
status=0
# Every CUDA test: none may be skipped here, so a skip is reported as a failure.
for t in core_tests sim_tests; do
  "$build/$t" --gtest_filter='*Cuda*:*Batched*' 2>&1 | tee "$out/$t.log" | tail -3 || status=1
  if grep -q "SKIPPED \]" "$out/$t.log"; then
    echo "gpu_check: $t skipped GPU tests on a GPU machine:" >&2
    grep "SKIPPED \]" "$out/$t.log" >&2
    status=1
  fi
done
BUILD=$build "$root/bench/gpu_train_throughput.sh" 2>&1 | tee "$out/train_throughput.txt"
BUILD=$build LOG="$out/batched_sim.log" "$root/bench/gpu_batched_clients.sh" 2>&1 |
  tee "$out/batched_clients.txt"
exit $status
