#!/usr/bin/env bash
# Issue 27's accuracy check side by side: the Fashion-MNIST mlp (784-256-10) under local
# DP-SGD at the same settings in fedmesh (fedmesh-node --local-only) and in Opacus 1.4 on
# PyTorch: Poisson sampling at batch 256 (q = 256/60000), clip 1, noise multiplier 1, lr 1.0
# without momentum, EPOCHS epochs, delta 1e-5. Prints test accuracy and epsilon of each
# (fedmesh's RDP accountant; Opacus's "rdp" accountant), and the wall time.
#   bench/dp_sgd_accuracy.sh             # EPOCHS=8; Opacus takes ~40 s per epoch on cpu-2c
# Environment: EPOCHS (8), BUILD (build), OPACUS_PY (/tmp/opacus-venv/bin/python, see bench/dp_sgd_opacus.py).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
epochs=${EPOCHS:-8}
py=${OPACUS_PY:-/tmp/opacus-venv/bin/python}
m=$(mktemp)
trap 'rm -f "$m"' EXIT
start=$(date +%s.%N)
"$build/bin/fedmesh-node" --local-only --model mlp --epochs "$epochs" --batch 256 --lr 1.0 \
  --threads 2 --metrics "$m" --set privacy.mode=dp-sgd --set privacy.clip=1 \
  --set privacy.noise_multiplier=1.0 --set privacy.delta=1e-5 >/dev/null
secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{print e - s}')
tail -1 "$m" | /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.stdin.read());
print(json.dumps({"impl": "fedmesh", "epochs": r["epoch"], "test_accuracy": r["test_accuracy"],
                  "epsilon": r["epsilon"], "seconds": float(sys.argv[1])}))' "$secs"
"$py" "$root/bench/dp_sgd_opacus.py" --accuracy-epochs "$epochs" --threads 2 2>/dev/null
