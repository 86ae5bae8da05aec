#!/usr/bin/env bash
# Breast cancer diagnosis across five hospitals, with one command on a fresh machine:
# installs what is missing (Debian's python3-sklearn for the data), builds fedmesh, splits the
# Wisconsin data over five hospitals (split.sh), starts a coordinator and five fedmesh-node
# processes on 127.0.0.1 (CurveZMQ, secure aggregation, federated evaluation only), then
# trains each hospital alone on the same rows (fedmesh-node --local-only, same held-out test
# rows, as many epochs as the federation ran) and prints AUC per hospital: federated vs
# local-only.
# Environment: RUN_DIR (runs/breast-cancer-<time>), ROUNDS (15), FEDMESH_BUILD_DIR (build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/lib.sh"
here="$root/examples/breast_cancer"
build=${FEDMESH_BUILD_DIR:-$root/build}
bin="$build/bin"
rounds=${ROUNDS:-15}
"$root/scripts/setup.sh"
ensure_package python3-sklearn "the Wisconsin breast cancer CSV"
"$root/scripts/build.sh" >/dev/null
run=${RUN_DIR:-$root/runs/breast-cancer-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$run" && cd "$run"
mkdir -p run data
# A small clinic that rarely sees a malignant case: where a hospital alone learns least.
MALIGNANT_SHARES="0.47 0.25 0.15 0.115 0.015" "$here/split.sh" data
gen_site_keys "$bin" coordinator hospital-{1..5}
cp "$here/aggregator.toml" "$here/hospital.toml" "$here/hospital_mlp.onnx" .

export OMP_WAIT_POLICY=passive  # six processes share the cores
start_coordinator "$bin" "$rounds"
echo "== $rounds rounds, 5 hospitals, secure aggregation, federated evaluation (logs in $run) =="
for h in 1 2 3 4 5; do
  "$bin/fedmesh-node" --config hospital.toml --set "aggregator.endpoint=$endpoint" \
    --set "node.id=hospital-$h" --set "node.key=keys/hospital-$h.key" \
    --set "node.db=run/hospital-$h.db" --set "node.metrics=run/hospital-$h-metrics.jsonl" \
    --set "data.dataset=csv:data/hospital-$h.csv" >"hospital-$h.log" 2>&1 &
  pids+=("$!")
done
wait "$agg" && rc=0 || rc=$?
[[ $rc -eq 0 ]] || { echo "coordinator exited $rc; see $run/coordinator.log" >&2; tail -5 coordinator.log >&2; exit 1; }

# Local-only baselines: each hospital alone, the same held-out rows (test_fraction 0.3,
# seed 7), the same model, loss and settings, epochs = rounds x local epochs.
epochs=$(sed -n 's/^epochs = \([0-9]*\).*/\1/p' aggregator.toml | head -1)
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
metrics=run/coordinator-metrics.jsonl
last_round=$(grep '"site":"\*"' "$metrics" | tail -1 | field round)
printf "\n%-11s %-9s %-10s %-14s %-14s\n" hospital patients malignant federated_auc local_only_auc
for h in 1 2 3 4 5; do
  "$bin/fedmesh-node" --local-only --model hospital_mlp.onnx --data "csv:data/hospital-$h.csv" \
    --label-column diagnosis --label-values benign,malignant --loss bce_with_logits \
    --test-fraction 0.3 --partition-seed 7 --epochs $((rounds * epochs)) --batch 16 --lr 0.05 \
    --momentum 0.9 --seed 1 --threads 1 --metrics "run/local-$h.jsonl" >"local-$h.log" 2>&1
  fed=$(grep "\"round\":$last_round," "$metrics" | grep "\"site\":\"hospital-$h\"" | field auc)
  local_auc=$(tail -1 "run/local-$h.jsonl" | field test_auc)
  printf "%-11s %-9s %-10s %-14.4f %-14.4f\n" "hospital-$h" "$(($(wc -l <"data/hospital-$h.csv") - 1))" \
    "$(grep -c ',malignant$' "data/hospital-$h.csv")" "$fed" "$local_auc"
done
total=$(grep "\"round\":$last_round," "$metrics" | grep '"site":"\*"')
printf "%-11s %-9s %-10s %-14.4f (example-weighted mean of the hospitals' AUCs)\n" all 569 212 \
  "$(field auc <<<"$total")"
echo
echo "== the coordinator's table (federated evaluation after the last round, [eval] finetune_epochs / local_only_epochs) =="
sed -n '/did federation help/,/all (example-weighted)/p' coordinator.log | sed 's/^\[[^]]*\] \[[^]]*\] \[[^]]*\] //'
echo "run folder: $run"
