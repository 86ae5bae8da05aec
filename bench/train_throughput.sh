#!/usr/bin/env bash
# Training throughput, fedmesh vs PyTorch, side by side in one run: same architecture,
# batch, thread count, SGD+momentum, real Fashion-MNIST already in memory.
# PyTorch runs twice per repeat: with Debian's OpenMP build of OpenBLAS preloaded (the
# strong baseline, same BLAS as fedmesh) and with the system default BLAS (the pthread
# build, as `apt install python3-torch` gives it). Each configuration is measured REPEATS
# times alternating the implementations; the table reports the best of each (least
# disturbed by other load) and fedmesh's ratio to each.
#   bench/train_throughput.sh            # needs a build (scripts/build.sh) and python3-torch
# Environment: THREADS (2), REPEATS (3), BUILD (build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
threads=${THREADS:-2}
repeats=${REPEATS:-3}
FEDMESH_SETUP_BENCH=1 "$root/scripts/setup.sh" >/dev/null
fm="$build/bench/fedmesh_train_throughput"
[[ -x "$fm" ]] || { echo "build first: scripts/build.sh" >&2; exit 2; }
py=/usr/bin/python3  # Debian's interpreter: python3-torch is installed for it

configs=("mlp 32 2000" "mlp 128 600" "cnn 32 60")
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
best() { sort -g | tail -1; }

printf "%-6s %-6s %-8s %12s %14s %9s %16s %9s\n" model batch threads fedmesh_sps torch_omp_sps ratio torch_system_sps ratio
for c in "${configs[@]}"; do
  read -r model batch steps <<<"$c"
  fms=() pts=() pss=()
  for ((r = 0; r < repeats; ++r)); do
    fms+=("$("$fm" --model "$model" --batch "$batch" --threads "$threads" --steps "$steps" --warmup 10 | field samples_per_s)")
    pts+=("$("$py" "$root/bench/torch_train_throughput.py" --model "$model" --batch "$batch" \
            --threads "$threads" --steps "$steps" --warmup 10 --json | field samples_per_s)")
    pss+=("$("$py" "$root/bench/torch_train_throughput.py" --model "$model" --batch "$batch" \
            --threads "$threads" --steps "$steps" --warmup 10 --blas system --json | field samples_per_s)")
  done
  f=$(printf "%s\n" "${fms[@]}" | best)
  p=$(printf "%s\n" "${pts[@]}" | best)
  q=$(printf "%s\n" "${pss[@]}" | best)
  printf "%-6s %-6s %-8s %12.0f %14.0f %9.2f %16.0f %9.2f\n" "$model" "$batch" "$threads" "$f" "$p" \
    "$(awk -v a="$f" -v b="$p" 'BEGIN{print a/b}')" "$q" "$(awk -v a="$f" -v b="$q" 'BEGIN{print a/b}')"
  echo "  runs fedmesh: ${fms[*]}" >&2
  echo "  runs pytorch (openmp blas): ${pts[*]}" >&2
  echo "  runs pytorch (system blas): ${pss[*]}" >&2
done
