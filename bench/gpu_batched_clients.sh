#!/usr/bin/env bash
# Batched client training on one GPU vs the same clients trained one after another, in one
# run: fedmesh-sim with 100 mlp clients (600 Fashion-MNIST samples each, IID), all 100
# selected every round, EPOCHS local epochs (1), ROUNDS rounds, codec none. Three configurations:
#   batched      [sim] device = DEVICE, batched_clients = 100 (all clients in one batch)
#   sequential   [sim] device = DEVICE, batched_clients = 1   (one client at a time on the GPU)
#   cpu          the default per-client CPU workers (threads = all cores), for reference
# Reports client-updates/s from fedmesh-sim's summary line, over the wall time of the whole
# run (data loading, aggregation and evaluation included) and over the rounds alone (what
# batching changes: loading is the same for all three), and the batched/sequential ratios
# (target >= 5).
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
rounds_rate() { sed -n 's/.*the rounds alone [0-9.]* s, \([0-9.]*\) updates\/s.*/\1/p'; }
best() { sort -g | tail -1; }
run() {  # label, extra args...: prints "best-wall-rate best-rounds-rate"
  local label=$1 r line walls=() rounds=()
  shift
  for ((r = 0; r < repeats; ++r)); do
    line=$(OMP_WAIT_POLICY=passive "$sim" "${common[@]}" "$@" 2>&1 >/dev/null |
           tee -a "${LOG:-/dev/null}" | grep "updates/s")
    walls+=("$(rate <<<"$line")")
    rounds+=("$(rounds_rate <<<"$line")")
  done
  echo "  runs $label: wall ${walls[*]}; rounds alone ${rounds[*]}" >&2
  echo "$(printf "%s\n" "${walls[@]}" | best) $(printf "%s\n" "${rounds[@]}" | best)"
}
read -r b br <<<"$(run batched --set sim.device="$device" --set sim.batched_clients=100)"
read -r s sr <<<"$(run sequential --set sim.device="$device" --set sim.batched_clients=1)"
read -r c cr <<<"$(run cpu --set sim.device=cpu --set sim.batched_clients=0)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{print a/b}'; }
printf "%-12s %18s %22s\n" config updates_per_s_wall updates_per_s_rounds
printf "%-12s %18.1f %22.1f\n" batched "$b" "$br" sequential "$s" "$sr" cpu "$c" "$cr"
printf "batched / sequential: %.2f (rounds alone %.2f)   batched / cpu: %.2f (rounds alone %.2f)\n" \
  "$(ratio "$b" "$s")" "$(ratio "$br" "$sr")" "$(ratio "$b" "$c")" "$(ratio "$br" "$cr")"
