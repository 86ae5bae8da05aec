#!/usr/bin/env bash
# Credit risk across three banks, with one command on a fresh machine: installs what is
# missing (Debian's r-cran-caret for the German credit data), builds fedmesh, splits the data
# over three banks (split.sh), starts a coordinator and three fedmesh-node processes on
# 127.0.0.1 (CurveZMQ, secure aggregation, federated evaluation only), then trains each bank
# alone on the same rows (fedmesh-node --local-only, same held-out test rows, as many epochs
# as the federation ran) and prints AUC per bank: federated vs local-only.
# Environment: RUN_DIR (runs/bank-<time>), ROUNDS (20), FEDMESH_BUILD_DIR (build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/lib.sh"
here="$root/examples/bank"
build=${FEDMESH_BUILD_DIR:-$root/build}
bin="$build/bin"
rounds=${ROUNDS:-20}
"$root/scripts/setup.sh"
ensure_package r-cran-caret "the German credit data"
FEDMESH_TARGETS="${FEDMESH_TARGETS:-fedmesh-node fedmesh-aggregator fedmesh-keys}" \
  "$root/scripts/build.sh" >/dev/null
run=${RUN_DIR:-$root/runs/bank-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$run" && cd "$run"
mkdir -p run data
"$here/split.sh" data
gen_site_keys "$bin" coordinator bank-{1..3}
cp "$here/aggregator.toml" "$here/bank.toml" "$here/bank_mlp.onnx" .

export OMP_WAIT_POLICY=passive  # four processes share the cores
start_coordinator "$bin" "$rounds"
echo "== $rounds rounds, 3 banks, secure aggregation, federated evaluation (logs in $run) =="
for b in 1 2 3; do
  "$bin/fedmesh-node" --config bank.toml --set "aggregator.endpoint=$endpoint" \
    --set "node.id=bank-$b" --set "node.key=keys/bank-$b.key" \
    --set "node.db=run/bank-$b.db" --set "node.metrics=run/bank-$b-metrics.jsonl" \
    --set "data.dataset=csv:data/bank-$b.csv" >"bank-$b.log" 2>&1 &
  pids+=("$!")
done
wait "$agg" && rc=0 || rc=$?
[[ $rc -eq 0 ]] || { echo "coordinator exited $rc; see $run/coordinator.log" >&2; tail -5 coordinator.log >&2; exit 1; }

# Local-only baselines: each bank alone, the same held-out rows (bank.toml's test_fraction
# and seed), the same model, columns, loss and settings, epochs = rounds x local epochs.
# The [data] and [train] settings are read from the two TOML files (the aggregator's [train]
# as sent with each task, the bank's weight_decay), so they are written once.
mapfile -t local_flags < <(/usr/bin/python3 - <<'EOF'
import tomllib
node = tomllib.load(open("bank.toml", "rb"))
agg = tomllib.load(open("aggregator.toml", "rb"))
d, t = node["data"], agg["train"]
wd = node["train"].get("weight_decay", 0.0)
flags = ["--label-column", d["label_column"], "--label-values", ",".join(d["label_values"]),
         "--categorical", ",".join(d["categorical"]), "--test-fraction", str(d["test_fraction"]),
         "--partition-seed", str(d["seed"]), "--loss", t["loss"], "--pos-weight", str(t["pos_weight"]),
         "--batch", str(t["batch"]), "--lr", str(t["lr"]), "--momentum", str(t["momentum"]), "--weight-decay", str(wd)]
for c in d["categories"]:
    flags += ["--categories", c]
print("\n".join(flags))
print(t["epochs"])
EOF
)
[[ ${#local_flags[@]} -gt 1 ]] || { echo "could not read bank.toml / aggregator.toml" >&2; exit 1; }
epochs=${local_flags[-1]}
unset 'local_flags[-1]'
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
metrics=run/coordinator-metrics.jsonl
last_round=$(grep '"site":"\*"' "$metrics" | tail -1 | field round)
printf "\n%-8s %-11s %-5s %-14s %-14s\n" bank applicants bad federated_auc local_only_auc
for b in 1 2 3; do
  "$bin/fedmesh-node" --local-only --model bank_mlp.onnx --data "csv:data/bank-$b.csv" \
    "${local_flags[@]}" --epochs $((rounds * epochs)) --seed 1 --threads 1 \
    --metrics "run/local-$b.jsonl" >"local-$b.log" 2>&1
  fed=$(grep "\"round\":$last_round," "$metrics" | grep "\"site\":\"bank-$b\"" | field auc)
  local_auc=$(tail -1 "run/local-$b.jsonl" | field test_auc)
  printf "%-8s %-11s %-5s %-14.4f %-14.4f\n" "bank-$b" "$(($(wc -l <"data/bank-$b.csv") - 1))" \
    "$(grep -c ',Bad$' "data/bank-$b.csv")" "$fed" "$local_auc"
done
total=$(grep "\"round\":$last_round," "$metrics" | grep '"site":"\*"')
printf "%-8s %-11s %-5s %-14.4f (example-weighted mean of the banks' AUCs)\n" all 1000 300 \
  "$(field auc <<<"$total")"
echo "run folder: $run"
