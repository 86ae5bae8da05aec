#!/usr/bin/env bash
# Issue 21's accuracy check over several seeds: 4 fedmesh-node ranks in [train] mode =
# "allreduce" (sync_every 1, batch 32 each, CurveZMQ ring on loopback, Fashion-MNIST in 4
# partitions) against one process with the combined batch (fedmesh-node --local-only
# --batch 128) on all the data, same epochs, rate and seed. One pair of runs carries the noise
# of drawing the batches differently (one process alone spreads over ~2 points across seeds),
# so the script reports each seed's pair and the means over SEEDS.
#   bench/allreduce_accuracy.sh              # SEEDS="0 1 2 3 4", EPOCHS=3: ~2 min per seed on cpu-2c
# Environment: SEEDS, EPOCHS (3), LR (0.1), BUILD (build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BUILD:-$root/build}/bin
seeds=${SEEDS:-0 1 2 3 4}
epochs=${EPOCHS:-3}
lr=${LR:-0.1}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
acc() { tail -1 "$1" | /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["test_accuracy"])'; }

source "$root/bench/allreduce_ranks.sh"
cd "$work"
allreduce_keys "$work" 4 "$bin"
rows=()
for s in $seeds; do
  rm -rf run && mkdir run
  allreduce_configs "$work" 4 "threads = 1
epochs = $epochs
batch = 32
lr = $lr" "seed = $s"
  pids=()
  for i in 1 2 3 4; do
    "$bin/fedmesh-node" --config "site-$i.toml" >"run/site-$i.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { echo "seed $s: a rank failed" >&2; tail -5 run/site-*.log >&2; exit 1; }; done
  pids=()
  sha=$(for i in 1 2 3 4; do tail -1 "run/site-$i.jsonl" | grep -o '"model_sha256":"[0-9a-f]*"'; done | sort -u | wc -l)
  "$bin/fedmesh-node" --local-only --epochs "$epochs" --batch 128 --lr "$lr" --threads 2 --seed "$s" \
    --metrics run/single.jsonl >run/single.log 2>&1
  together=$(acc run/site-1.jsonl)
  alone=$(acc run/single.jsonl)
  echo "{\"seed\": $s, \"ranks_4x32\": $together, \"one_process_128\": $alone, \"distinct_rank_models\": $sha}"
  rows+=("$together $alone")
done
printf '%s\n' "${rows[@]}" | awk '{a += $1; b += $2; n++} END {
  printf "{\"seeds\": %d, \"mean_ranks_4x32\": %.4f, \"mean_one_process_128\": %.4f, \"difference_points\": %.2f}\n",
         n, a / n, b / n, 100 * (a - b) / n }'
