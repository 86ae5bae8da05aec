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
# Every CUDA test: none may be skipped for want of a device.
for t in core_tests sim_tests; do
  "$build/$t" --gtest_filter='*Cuda*:*Batched*' 2>&1 | tee "$out/$t.log" | tail -3 || status=1
  # Tests of the no-device path skip with "a CUDA device is present"; a GPU test that
  # skips says "no CUDA device", which on a GPU machine is a failure.
  if grep -q "^no CUDA device" "$out/$t.log"; then
    echo "gpu_check: $t skipped GPU tests on a GPU machine:" >&2
    grep -B2 "^no CUDA device" "$out/$t.log" >&2
    status=1
  fi
done
BUILD=$build "$root/bench/gpu_train_throughput.sh" 2>&1 | tee "$out/train_throughput.txt"
BUILD=$build LOG="$out/batched_sim.log" "$root/bench/gpu_batched_clients.sh" 2>&1 |
  tee "$out/batched_clients.txt"
exit $status
