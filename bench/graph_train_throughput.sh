#!/usr/bin/env bash
# Training throughput of imported ONNX models (issue 18), side by side in one run:
#   mlp (built-in)    fedmesh --model mlp --hidden 256 --engine layers    vs PyTorch FmnistMLP
#                     (the layer code, the "fixed mlp" the graph executor is measured against)
#   mlp (onnx graph)  fedmesh --model fmnist_mlp.onnx (the same 784-256-10) vs PyTorch FmnistMLP
#   resnet (onnx)     fedmesh --model fmnist_resnet.onnx                  vs PyTorch FmnistResNet
# The ONNX files are exported here from examples/pytorch/models.py, the nn.Modules PyTorch
# trains. Same thread count, batch, SGD lr/momentum, real Fashion-MNIST in memory, one
# shuffled epoch over the same number of samples; fedmesh's figure is the epoch_samples_per_s
# of its --metrics line (the epoch's training loop only, not the test evaluation),
# PyTorch's is timed the same way (bench/graph_train_torch.py). Each configuration runs
# REPEATS times alternating the implementations; the table reports the best of each, the
# ratio fedmesh/PyTorch, and the graph executor's cost: graph mlp / built-in mlp.
# Run it on an otherwise idle machine: with THREADS = cores and other load, the spinning
# OpenMP threads of both sides are descheduled and the figures become erratic (10-30x slower).
#   bench/graph_train_throughput.sh              # batch 32
#   bench/graph_train_throughput.sh --batch256   # batch 32 and 256
# Environment: THREADS (2), REPEATS (3), BUILD (build), LR (0.01), MOMENTUM (0.9),
#   MLP_PARTITIONS (1: all 60000 samples), RESNET_PARTITIONS (5: 12000 samples; the epoch
#   trains on partition 0 of 60000/N, PyTorch on the same count), BATCHES (overrides the
#   batch list, e.g. "32 64 256"), WORK (BUILD/bench-graph: exported models, metrics, logs).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
threads=${THREADS:-2}
repeats=${REPEATS:-3}
lr=${LR:-0.01}
momentum=${MOMENTUM:-0.9}
mlp_parts=${MLP_PARTITIONS:-1}
resnet_parts=${RESNET_PARTITIONS:-5}
work=${WORK:-$build/bench-graph}
batches=${BATCHES:-32}
for arg in "$@"; do
  case "$arg" in
    --batch256) [[ -n "${BATCHES:-}" ]] || batches="32 256" ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
FEDMESH_SETUP_BENCH=1 "$root/scripts/setup.sh" >/dev/null
node="$build/bin/fedmesh-node"
[[ -x "$node" ]] || { echo "build first: scripts/build.sh" >&2; exit 2; }
py=/usr/bin/python3  # Debian's interpreter: python3-torch and python3-onnx are installed for it

mkdir -p "$work"
"$py" "$root/examples/pytorch/models.py" --out "$work" >&2
field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^,\"}]*\).*/\1/p" | tail -1; }
best() { sort -g | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "nan" }'; }

# run_fedmesh MODEL BATCH PARTITIONS ENGINE -> "epoch_samples_per_s train_samples"
run_fedmesh() {
  local m="$work/metrics.jsonl" log="$work/fedmesh.log"
  rm -f "$m"
  if ! "$node" --local-only --model "$1" --hidden 256 --data fashion-mnist --num-partitions "$3" \
      --index 0 --epochs 1 --batch "$2" --lr "$lr" --momentum "$momentum" --threads "$threads" \
      --engine "$4" --metrics "$m" >"$log" 2>&1; then
    cat "$log" >&2; exit 1
  fi
  echo "$(field epoch_samples_per_s <"$m") $(field train_samples <"$m")"
}
# run_torch MODEL BATCH SAMPLES -> epoch samples/s
run_torch() {
  "$py" "$root/bench/graph_train_torch.py" --model "$1" --batch "$2" --samples "$3" \
    --threads "$threads" --lr "$lr" --momentum "$momentum" --json | field epoch_samples_per_s
}

echo "threads $threads, repeats $repeats (best of each), lr $lr, momentum $momentum" >&2
printf "%-17s %-6s %-8s %12s %12s %9s\n" config batch samples fedmesh_sps torch_sps ratio
for batch in $batches; do
  builtin_best=
  for cfg in "mlp-builtin mlp $mlp_parts mlp layers" "mlp-onnx $work/fmnist_mlp.onnx $mlp_parts mlp auto" \
             "resnet-onnx $work/fmnist_resnet.onnx $resnet_parts resnet auto"; do
    read -r name model parts tmodel engine <<<"$cfg"
    fms=() pts=()
    for ((r = 0; r < repeats; ++r)); do
      out=$(run_fedmesh "$model" "$batch" "$parts" "$engine")  # a plain assignment: set -e sees a failure
      read -r sps samples <<<"$out"
      fms+=("$sps")
      out=$(run_torch "$tmodel" "$batch" "$samples")
      pts+=("$out")
    done
    f=$(printf "%s\n" "${fms[@]}" | best)
    p=$(printf "%s\n" "${pts[@]}" | best)
    printf "%-17s %-6s %-8s %12.0f %12.0f %9s\n" "$name" "$batch" "$samples" "$f" "$p" "$(ratio "$f" "$p")"
    echo "  runs fedmesh: ${fms[*]}" >&2
    echo "  runs pytorch: ${pts[*]}" >&2
    case "$name" in
      mlp-builtin) builtin_best=$f ;;
      mlp-onnx) graph_best=$f ;;
    esac
  done
  printf "  graph mlp / built-in mlp, batch %s: %s (%.0f vs %.0f samples/s)\n" "$batch" \
    "$(ratio "$graph_best" "$builtin_best")" "$graph_best" "$builtin_best"
done
