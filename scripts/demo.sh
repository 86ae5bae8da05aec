#!/usr/bin/env bash
# The main job, from a fresh machine: install what is missing, build, then train on real
# Fashion-MNIST on this machine's CPU and print the per-epoch accuracy table.
# Environment: DEMO_MODEL (mlp), DEMO_EPOCHS (3), DEMO_THREADS (0 = all cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FEDMESH_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
FEDMESH_TARGETS=fedmesh-node "$root/scripts/build.sh"

out="$root/runs/demo"
mkdir -p "$out"
model=${DEMO_MODEL:-mlp}
epochs=${DEMO_EPOCHS:-3}
echo
echo "== local training: $model on Fashion-MNIST, $epochs epoch(s) =="
"$build/bin/fedmesh-node" --local-only --node-id demo --model "$model" --data fashion-mnist \
  --epochs "$epochs" --batch 32 --lr 0.01 --momentum 0.9 --threads "${DEMO_THREADS:-0}" \
  --metrics "$out/metrics.jsonl"

# The accuracy table, from the metrics file the run wrote (one JSON line per epoch).
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
echo
printf "%-6s %-11s %-10s %-10s %-9s\n" epoch train_loss test_loss test_acc samples/s
while IFS= read -r line; do
  printf "%-6s %-11.4f %-10.4f %-10.4f %-9.0f\n" \
    "$(field epoch <<<"$line")" "$(field train_loss <<<"$line")" \
    "$(field test_loss <<<"$line")" "$(field test_accuracy <<<"$line")" \
    "$(field epoch_samples_per_s <<<"$line")"
done < "$out/metrics.jsonl"
echo
echo "metrics: $out/metrics.jsonl"
