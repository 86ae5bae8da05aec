#!/usr/bin/env bash
# The five hospitals of this example federating with record-level DP (issue 27): every
# hospital trains with DP-SGD ([privacy] mode = "dp-sgd", clip 1) under its own epsilon
# budget (delta 1e-5), refuses the coordinator's task once another round would exceed it,
# and the federation goes on with the others; then the same without DP. One federation per
# budget (1, 3, 8, none), 12 rounds of one local epoch each, on 127.0.0.1 (CurveZMQ); the
# coordinator has no patient data and scores the model by federated evaluation on each
# hospital's held-out 30% (seed 7, the rows dp_sgd.sh and run.sh hold out). Prints, per
# hospital and budget: AUC of the final global model on its held-out rows, the epsilon it
# spent and the rounds it trained; and the coordinator's privacy line of the last round.
# Model: the built-in logreg on each hospital's own z-scored columns (standardize.awk).
#   examples/breast_cancer/dp_sgd_federated.sh      # after scripts/build.sh; about a minute
# Environment: RUN_DIR (runs/breast-cancer-dpfed-<time>), FEDMESH_BUILD_DIR (build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/lib.sh"
here="$root/examples/breast_cancer"
bin=${FEDMESH_BUILD_DIR:-$root/build}/bin
[[ -x "$bin/fedmesh-aggregator" ]] || { echo "build first: scripts/build.sh" >&2; exit 2; }
top=${RUN_DIR:-$root/runs/breast-cancer-dpfed-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$top/data" && cd "$top"
"$here/split.sh" data >/dev/null
for h in 1 2 3 4 5; do
  awk -f "$here/standardize.awk" "data/hospital-$h.csv" "data/hospital-$h.csv" >"data/hospital-$h.std.csv"
done
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
export OMP_WAIT_POLICY=passive  # six processes share the cores
declare -A result
summary=()
# budget:noise multiplier, as dp_sgd.sh
for s in "1:4.0" "3:2.0" "8:1.0" "none:0"; do
  budget=${s%%:*} z=${s##*:}
  run="$top/eps-$budget"
  mkdir -p "$run/run" && cd "$run"
  gen_site_keys "$bin" coordinator hospital-{1..5}
  cp "$here/dp_sgd_federated.toml" aggregator.toml
  cat >hospital.toml <<TOML
# A hospital of this run; its id, key, store and CSV come with --set.
[federation]
id = "hospital-dp-demo"
[aggregator]
public_key = "keys/coordinator.pub"
[model]
name = "logreg"
[data]
label_column = "diagnosis"
label_values = ["benign", "malignant"]   # malignant = 1, the positive class
test_fraction = 0.3
seed = 7
[train]
threads = 1
TOML
  rounds=$(sed -n 's/^total = \([0-9]*\).*/\1/p' aggregator.toml)
  pids=()
  start_coordinator "$bin" "$rounds"
  for h in 1 2 3 4 5; do
    dp=()
    if [[ $budget != none ]]; then
      dp=(--set privacy.mode=dp-sgd --set privacy.clip=1 --set "privacy.noise_multiplier=$z"
          --set "privacy.epsilon_budget=$budget")
    fi
    "$bin/fedmesh-node" --config hospital.toml --set "aggregator.endpoint=$endpoint" \
      --set "node.id=hospital-$h" --set "node.key=keys/hospital-$h.key" \
      --set "node.db=run/hospital-$h.db" --set "node.metrics=run/hospital-$h-metrics.jsonl" \
      --set "data.dataset=csv:$top/data/hospital-$h.std.csv" "${dp[@]}" >"hospital-$h.log" 2>&1 &
    pids+=("$!")
  done
  wait "$agg" && rc=0 || rc=$?
  kill_started
  [[ $rc -eq 0 ]] || { echo "coordinator exited $rc; see $run/coordinator.log" >&2; tail -5 coordinator.log >&2; exit 1; }
  metrics=run/coordinator-metrics.jsonl
  last=$(grep '"site":"\*"' "$metrics" | tail -1 | field round)
  for h in 1 2 3 4 5; do
    auc=$(grep "\"round\":$last," "$metrics" | grep "\"site\":\"hospital-$h\"" | field auc)
    trained=$(grep -c '"epoch"\|"round"' "run/hospital-$h-metrics.jsonl" 2>/dev/null || true)
    eps=$(tail -1 "run/hospital-$h-metrics.jsonl" 2>/dev/null | field epsilon)
    if [[ -n $eps ]]; then
      result[$h,$budget]=$(printf "%.4f (%.2f, %s r)" "${auc:-nan}" "$eps" "$trained")
    else
      result[$h,$budget]=$(printf "%.4f (%s r)" "${auc:-nan}" "$trained")
    fi
  done
  line=$(grep -o 'round [0-9]* privacy: .*' coordinator.log | tail -1 || true)
  summary+=("eps<=$budget: ${line:-no privacy line (no DP anywhere)}")
  cd "$top"
done
printf "%-11s %-9s" hospital patients
for b in 1 3 8 none; do printf " %-24s" "eps<=$b: AUC (eps, rounds)"; done
printf "\n"
for h in 1 2 3 4 5; do
  printf "%-11s %-9s" "hospital-$h" "$(($(wc -l <"data/hospital-$h.csv") - 1))"
  for b in 1 3 8 none; do printf " %-24s" "${result[$h,$b]}"; done
  printf "\n"
done
printf "%s\n" "${summary[@]}"
echo "(logs and metrics in $top)"
