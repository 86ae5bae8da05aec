#!/usr/bin/env bash
# Batched client training on one GPU vs the same clients trained one after another, in one
# run: fedmesh-sim with 100 mlp clients (600 Fashion-MNIST samples each, IID), all 100
# selected every round, EPOCHS local epochs (1), ROUNDS rounds, codec none. Three configurations:
#   batched      [sim] device = DEVICE, batched_clients = 100 (all clients in one batch)
#   sequential   [sim] device = DEVICE, batched_clients = 1   (one client at a time on the GPU)
#   cpu          the default per-client CPU workers (threads = all cores), for reference
# Reports client-updates/s from fedmesh-sim's summary line (wall time of the whole run,
# aggregation and evaluation included) and the batched/sequential ratio (target >= 5).
#   bench/gpu_batched_clients.sh      # needs a CUDA build and a GPU
# Environment: BUILD (build), DEVICE (cuda), ROUNDS (5), REPEATS (2), EPOCHS (1: local epochs).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
device=${DEVICE:-cuda}
rounds=${ROUNDS:-5}
repeats=${REPEATS:-2}
epochs=${EPOCHS:-1}
sim="$build/bin/fedmesh-sim"
[[ -x "$sim" ]] || { echo "build first: scripts/build.sh" >&2; exit 2; }
common=(--set sim.mode=aggregator --set sim.clients=100 --set sim.clients_per_round=100
        --set sim.rounds="$rounds" --set sim.model=mlp --set sim.partition=iid
        --set sim.codec=none --set train.epochs="$epochs" --set train.batch=32 --set train.lr=0.05
        --set eval.every=1000)
rate() { sed -n 's/.* wall (\([0-9.]*\) updates\/s.*/\1/p'; }
best() { sort -g | tail -1; }
run() {  # label, extra args...
  local label=$1 r vals=()
  shift
  for ((r = 0; r < repeats; ++r)); do
    vals+=("$(OMP_WAIT_POLICY=passive "$sim" "${common[@]}" "$@" 2>&1 >/dev/null | tee -a "${LOG:-/dev/null}" | rate)")
  done
  echo "  runs $label: ${vals[*]}" >&2
  printf "%s\n" "${vals[@]}" | best
}
b=$(run batched --set sim.device="$device" --set sim.batched_clients=100)
s=$(run sequential --set sim.device="$device" --set sim.batched_clients=1)
c=$(run cpu --set sim.device=cpu --set sim.batched_clients=0)
printf "%-12s %14s\n" config updates_per_s
printf "%-12s %14.1f\n" batched "$b" sequential "$s" cpu "$c"
printf "batched / sequential: %.2f   batched / cpu: %.2f\n" \
  "$(awk -v a="$b" -v b="$s" 'BEGIN{print a/b}')" "$(awk -v a="$b" -v b="$c" 'BEGIN{print a/b}')"
