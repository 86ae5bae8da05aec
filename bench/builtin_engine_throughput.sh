#!/usr/bin/env bash
# The built-in models on the graph executor against the same models on the layer code
# (`fedmesh-node --engine graph` vs `--engine layers`), side by side in one run: one epoch of
# real Fashion-MNIST per run, same threads, batch, lr and momentum, alternating the two
# engines REPEATS times; the table gives the best epoch_samples_per_s of each (the training
# loop only, from the --metrics line), the ratio graph/layers, and both test accuracies (the
# same flat vector and initial values; they differ by float rounding and dropout draws).
#   bench/builtin_engine_throughput.sh
# Environment: THREADS (2), REPEATS (3), BATCH (32), BUILD (build), MODELS ("logreg mlp cnn"),
#   CNN_PARTITIONS (5: the cnn trains on 12000 samples), WORK (BUILD/bench-engine), DEVICE (cpu;
#   cuda compares the two engines on a GPU: bench/gpu_device_run.sh's engine step).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
threads=${THREADS:-2}
repeats=${REPEATS:-3}
batch=${BATCH:-32}
models=${MODELS:-logreg mlp cnn}
cnn_parts=${CNN_PARTITIONS:-5}
device=${DEVICE:-cpu}
work=${WORK:-$build/bench-engine}
node="$build/bin/fedmesh-node"
[[ -x "$node" ]] || { echo "build first: scripts/build.sh" >&2; exit 2; }
mkdir -p "$work"
field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^,\"}]*\).*/\1/p" | tail -1; }
best() { sort -g | tail -1; }

# run MODEL ENGINE PARTITIONS -> "epoch_samples_per_s test_accuracy"
run() {
  local m="$work/metrics.jsonl" log="$work/node.log"
  rm -f "$m"
  if ! "$node" --local-only --model "$1" --hidden 256 --data fashion-mnist --num-partitions "$3" \
      --index 0 --epochs 1 --batch "$batch" --lr 0.01 --momentum 0.9 --threads "$threads" \
      --engine "$2" --device "$device" --metrics "$m" >"$log" 2>&1; then
    cat "$log" >&2; exit 1
  fi
  echo "$(field epoch_samples_per_s <"$m") $(field test_accuracy <"$m")"
}

echo "device $device, threads $threads, batch $batch, repeats $repeats (best of each)" >&2
printf "%-7s %12s %12s %7s %9s %9s\n" model graph_sps layers_sps ratio acc_graph acc_layers
for model in $models; do
  parts=1
  [[ "$model" == cnn ]] && parts=$cnn_parts
  gs=() ls=()
  for ((r = 0; r < repeats; ++r)); do
    out=$(run "$model" graph "$parts"); read -r sps acc_g <<<"$out"; gs+=("$sps")
    out=$(run "$model" layers "$parts"); read -r sps acc_l <<<"$out"; ls+=("$sps")
  done
  g=$(printf "%s\n" "${gs[@]}" | best)
  l=$(printf "%s\n" "${ls[@]}" | best)
  printf "%-7s %12.0f %12.0f %7s %9s %9s\n" "$model" "$g" "$l" \
    "$(awk -v a="$g" -v b="$l" 'BEGIN{ printf "%.2f", a/b }')" "$acc_g" "$acc_l"
  echo "  runs graph: ${gs[*]}" >&2
  echo "  runs layers: ${ls[*]}" >&2
done
