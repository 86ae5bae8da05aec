#!/usr/bin/env bash
# GPU training throughput, fedmesh's CUDA backend vs PyTorch on the same GPU, side by side
# in one run: same architecture, batch, SGD+momentum, real Fashion-MNIST, FP32 (TF32 off on
# both sides). Configurations from the GPU issue: mlp and cnn at batch 32 and 256. Each
# is measured REPEATS times alternating the implementations; the table reports the best of
# each and fedmesh's ratio.
#   bench/gpu_train_throughput.sh        # needs a CUDA build (scripts/build.sh) and torch with CUDA
# Environment: REPEATS (3), BUILD (build), DEVICE (cuda), PY (python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
repeats=${REPEATS:-3}
device=${DEVICE:-cuda}
py=${PY:-python3}
fm="$build/bench/fedmesh_train_throughput"
[[ -x "$fm" ]] || { echo "build first: scripts/build.sh" >&2; exit 2; }

configs=("mlp 32 3000" "mlp 256 2000" "cnn 32 1500" "cnn 256 400")
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p"; }
best() { sort -g | tail -1; }

"$fm" --model mlp --batch 32 --steps 1 --warmup 0 --device "$device" | field device >&2
"$py" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' >&2
# fedmesh's convolutions take, per layer, whichever of cuDNN and im2col + cuBLAS it measured
# faster (the default); the cnn rows also run each path alone (FEDMESH_CUDA_CONV=im2col |
# cudnn) in the same loop.
printf "%-6s %-6s %14s %14s %9s %14s %14s\n" model batch fedmesh_sps torch_sps ratio im2col_sps \
  cudnn_sps
for c in "${configs[@]}"; do
  read -r model batch steps <<<"$c"
  fms=() pts=() ims=() cds=()
  fm_run() {
    "$fm" --model "$model" --batch "$batch" --threads 1 --steps "$steps" --warmup 50 \
      --device "$device" | field samples_per_s
  }
  for ((r = 0; r < repeats; ++r)); do
    fms+=("$(fm_run)")
    pts+=("$("$py" "$root/bench/torch_train_throughput.py" --model "$model" --batch "$batch" \
            --threads 1 --steps "$steps" --warmup 50 --device "$device" --blas system --json |
          field samples_per_s)")
    if [[ $model == cnn ]]; then
      ims+=("$(FEDMESH_CUDA_CONV=im2col fm_run)")
      cds+=("$(FEDMESH_CUDA_CONV=cudnn fm_run)")
    fi
  done
  f=$(printf "%s\n" "${fms[@]}" | best)
  p=$(printf "%s\n" "${pts[@]}" | best)
  i=- d=-
  if [[ ${#ims[@]} -gt 0 ]]; then
    i=$(printf "%s\n" "${ims[@]}" | best | cut -d. -f1)
    d=$(printf "%s\n" "${cds[@]}" | best | cut -d. -f1)
  fi
  printf "%-6s %-6s %14.0f %14.0f %9.2f %14s %14s\n" "$model" "$batch" "$f" "$p" \
    "$(awk -v a="$f" -v b="$p" 'BEGIN{print a/b}')" "$i" "$d"
  echo "  runs fedmesh: ${fms[*]}" >&2
  echo "  runs pytorch: ${pts[*]}" >&2
  if [[ ${#ims[@]} -gt 0 ]]; then
    echo "  runs fedmesh im2col: ${ims[*]}" >&2
    echo "  runs fedmesh cudnn: ${cds[*]}" >&2
  fi
done
