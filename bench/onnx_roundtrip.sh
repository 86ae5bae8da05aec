#!/usr/bin/env bash
# ONNX round trip, the acceptance check of the model-graph issue: a PyTorch model exported
# to ONNX is imported by fedmesh, trained for one epoch, exported again, and onnxruntime
# running the exported file on the Fashion-MNIST test set (10k) gets the test accuracy
# fedmesh printed, to 3 decimals (|diff| < 0.0005). Also runs onnx.checker (full_check) on
# the exported file and prints both test losses.
#   bench/onnx_roundtrip.sh                   # exports examples/pytorch fmnist_resnet.onnx
#   bench/onnx_roundtrip.sh path/to/model.onnx
# Environment: BUILD (build), THREADS (2), PARTITIONS (10: trains on 60000/10 = 6000 samples),
#   EPOCHS (1), BATCH (32), LR (0.01), MOMENTUM (0.9), WORK (BUILD/bench-roundtrip),
#   ORT_PYTHON (an interpreter with onnxruntime and numpy; default: the venv BUILD/bench-venv,
#   made with pip if missing: scripts/lib.sh bench_ort_python).
# onnxruntime is a dependency of this check only: nothing else imports it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
threads=${THREADS:-2}
partitions=${PARTITIONS:-10}
epochs=${EPOCHS:-1}
batch=${BATCH:-32}
lr=${LR:-0.01}
momentum=${MOMENTUM:-0.9}
work=${WORK:-$build/bench-roundtrip}
FEDMESH_SETUP_BENCH=1 "$root/scripts/setup.sh" >/dev/null
node="$build/bin/fedmesh-node"
[[ -x "$node" ]] || { echo "build first: scripts/build.sh" >&2; exit 2; }
sys_py=/usr/bin/python3  # Debian's interpreter: python3-torch and python3-onnx are installed for it

source "$root/scripts/lib.sh"
ort_py=$(bench_ort_python "$build")

mkdir -p "$work"
model=${1:-}
if [[ -z "$model" ]]; then
  "$sys_py" "$root/examples/pytorch/models.py" --out "$work" --models fmnist_resnet
  model="$work/fmnist_resnet.onnx"
fi
out="$work/trained.onnx"
metrics="$work/metrics.jsonl"
rm -f "$out" "$metrics"

"$build/bin/fedmesh-model" inspect "$model" | sed -n '1,6p'
"$node" --local-only --model "$model" --data fashion-mnist --num-partitions "$partitions" --index 0 \
  --epochs "$epochs" --batch "$batch" --lr "$lr" --momentum "$momentum" --threads "$threads" \
  --metrics "$metrics" --save-model "$out"
"$sys_py" "$root/bench/onnx_roundtrip.py" check "$out"
"$ort_py" "$root/bench/onnx_roundtrip.py" compare --model "$out" --metrics "$metrics" --threads "$threads"
