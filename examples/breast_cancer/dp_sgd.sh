#!/usr/bin/env bash
# Record-level privacy at each hospital (issue 27): every hospital trains alone with DP-SGD
# ([privacy] mode = "dp-sgd", through --set with --local-only) at epsilon budgets of 1, 3 and
# 8 (delta 1e-5) and without DP, on its own rows of the Wisconsin data (split.sh), and the
# script prints the held-out AUC and the epsilon spent per hospital.
# Model: fedmesh's built-in logreg (DP-SGD runs on Dense models; the federated example's ONNX
# model starts with a BatchNorm, which mixes a batch's patients and which DP-SGD must refuse),
# so each hospital first standardises its own 30 columns (standardize.awk: its own means and
# deviations, computed on all its rows, test rows included). Each budget has its own noise
# multiplier; training runs up to EPOCHS epochs and stops before an epoch would exceed the budget.
#   examples/breast_cancer/dp_sgd.sh        # after scripts/build.sh; about a second a run
# The noise comes from the OS CSPRNG, so every run's figures differ a little.
# Environment: RUN_DIR (runs/breast-cancer-dp-<time>), EPOCHS (20), FEDMESH_BUILD_DIR (build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here="$root/examples/breast_cancer"
bin=${FEDMESH_BUILD_DIR:-$root/build}/bin
epochs=${EPOCHS:-20}
[[ -x "$bin/fedmesh-node" ]] || { echo "build first: scripts/build.sh" >&2; exit 2; }
run=${RUN_DIR:-$root/runs/breast-cancer-dp-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$run/data" && cd "$run"
"$here/split.sh" data >/dev/null
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
# budget:noise multiplier
settings=("1:4.0" "3:2.0" "8:1.0" "none:0")
printf "%-11s %-9s" hospital patients
for s in "${settings[@]}"; do printf " %-22s" "eps<=${s%%:*}: AUC (eps)"; done
printf "\n"
for h in 1 2 3 4 5; do
  awk -f "$here/standardize.awk" "data/hospital-$h.csv" "data/hospital-$h.csv" >"data/hospital-$h.std.csv"
  printf "%-11s %-9s" "hospital-$h" "$(($(wc -l <"data/hospital-$h.csv") - 1))"
  for s in "${settings[@]}"; do
    budget=${s%%:*} z=${s##*:} dp=()
    if [[ $budget != none ]]; then
      dp=(--set privacy.mode=dp-sgd --set privacy.clip=1 --set "privacy.noise_multiplier=$z"
          --set "privacy.epsilon_budget=$budget")
    fi
    m="h$h-$budget.jsonl"
    "$bin/fedmesh-node" --local-only --model logreg --data "csv:data/hospital-$h.std.csv" \
      --label-column diagnosis --label-values benign,malignant --test-fraction 0.3 \
      --partition-seed 7 --epochs "$epochs" --batch 8 --lr 0.1 --seed 1 --threads 1 \
      --metrics "$m" "${dp[@]}" >"h$h-$budget.log" 2>&1
    if [[ -s $m ]]; then
      auc=$(tail -n 1 "$m" | field test_auc) eps=$(tail -n 1 "$m" | field epsilon) ep=$(tail -n 1 "$m" | field epoch)
      eps=${eps:-no DP}
      printf " %-22s" "$(printf "%.4f (%s, %s ep)" "$auc" "${eps:0:5}" "$ep")"
    else
      printf " %-22s" "no epoch fits"
    fi
  done
  printf "\n"
done
echo "(logs and metrics in $run)"
