#!/usr/bin/env bash
# DP-SGD step time (issue 27), side by side in one run: fedmesh's DP-SGD step against its
# own non-private step, and Opacus 1.4 against plain PyTorch, same mlp, batch and threads,
# fixed-size batches. Targets: fedmesh DP-SGD <= 2x its non-private step, and faster than
# Opacus. Needs a build with FEDMESH_BUILD_BENCH and a venv with Opacus (see
# bench/dp_sgd_opacus.py; OPACUS_PY points at its python).
#   bench/dp_sgd_step.sh                  # batch 256, 2 threads
#   MODEL=cnn BATCH=64 STEPS=20 bench/dp_sgd_step.sh   # the built-in cnn (Conv2d per-example gradients)
# Environment: MODEL (mlp), BATCH (256), THREADS (2), REPEATS (3), STEPS (200), BUILD (build),
# OPACUS_PY (/tmp/opacus-venv/bin/python).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
batch=${BATCH:-256}
threads=${THREADS:-2}
repeats=${REPEATS:-3}
model=${MODEL:-mlp}
steps=${STEPS:-200}
warmup=$(( steps / 10 > 0 ? steps / 10 : 1 ))
py=${OPACUS_PY:-/tmp/opacus-venv/bin/python}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 0; r < repeats; ++r)); do  # alternate the implementations
  OMP_WAIT_POLICY=passive "$build/bench/fedmesh_dp_sgd_step" --model "$model" --batch "$batch" --threads "$threads" \
    --steps "$steps" --warmup "$warmup" --repeats 1 | tee -a "$out"
  "$py" "$root/bench/dp_sgd_opacus.py" --model "$model" --batch "$batch" --threads "$threads" \
    --steps "$steps" --warmup "$warmup" --repeats 1 | tee -a "$out"
done
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
best = {}
for r in rows:
    k = (r["impl"], r["variant"])
    best[k] = min(best.get(k, 1e9), r["step_ms"])
fp, fd = best[("fedmesh", "non-private")], best[("fedmesh", "dp-sgd")]
tp, op = best[("pytorch", "non-private")], best[("opacus", "dp-sgd")]
print("| step | fedmesh ms | PyTorch / Opacus ms |")
print("|---|---|---|")
print("| non-private | %.3f | %.3f |" % (fp, tp))
print("| DP-SGD | %.3f | %.3f |" % (fd, op))
print("fedmesh DP-SGD / its non-private step: %.2f (target <= 2)" % (fd / fp))
print("Opacus / PyTorch: %.2f;  fedmesh DP-SGD vs Opacus: %.2fx faster (target > 1)" % (op / tp, op / fd))
PY
