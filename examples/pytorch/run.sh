#!/usr/bin/env bash
# Four sites train a PyTorch CNN on Fashion-MNIST with their own training script
# (train.py, started by each fedmesh-node through [train] external), federated by one
# aggregator with secure aggregation, all on 127.0.0.1 with CurveZMQ. One command:
#   examples/pytorch/run.sh                 # PyTorch trainers (the default)
#   TRAINER=native examples/pytorch/run.sh  # the same federation, fedmesh's own trainer
# Prints one row per round (the aggregator scores the global model on the Fashion-MNIST
# test set with fedmesh's engine). Environment: ROUNDS (5), SITES (4), RUN_DIR
# (runs/pytorch-<trainer>-<time>). Needs python3-torch and python3-onnx (Debian).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/lib.sh"
build=${FEDMESH_BUILD_DIR:-$root/build}
bin="$build/bin"
trainer=${TRAINER:-pytorch}
rounds=${ROUNDS:-5}
sites=${SITES:-4}
[[ -x "$bin/fedmesh-node" && -x "$bin/fedmesh-aggregator" ]] ||
  FEDMESH_TARGETS="fedmesh-node fedmesh-aggregator fedmesh-keys" "$root/scripts/build.sh"
/usr/bin/python3 -c "import torch, onnx" 2>/dev/null || {
  echo "needs Debian's python3-torch and python3-onnx: apt-get install python3-torch python3-onnx" >&2
  exit 2
}
export OMP_WAIT_POLICY=passive
run=${RUN_DIR:-$root/runs/pytorch-$trainer-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$run/run"
cd "$run"
cp "$root"/examples/pytorch/aggregator.toml "$root"/examples/pytorch/site.toml .
/usr/bin/python3 "$root/examples/pytorch/models.py" --out run --models fmnist_cnn >/dev/null
site_ids=()
for i in $(seq 1 "$sites"); do site_ids+=("site-$i"); done
gen_site_keys "$bin" aggregator "${site_ids[@]}"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$bin/fedmesh-aggregator" --config aggregator.toml --set "aggregator.listen=tcp://127.0.0.1:*" \
  --set "rounds.total=$rounds" --set "rounds.clients_per_round=$sites" \
  --set "rounds.min_available_clients=$sites" --set "rounds.min_clients=$((sites > 3 ? sites - 1 : sites))" \
  >aggregator.log 2>&1 &
agg=$!
pids+=("$agg")
endpoint=$(wait_for_endpoint aggregator.log "$agg") || { echo "aggregator did not start" >&2; exit 1; }
echo "== $sites sites, $trainer trainers, $rounds rounds, secure aggregation (logs in $run) =="
for i in $(seq 1 "$sites"); do
  id="site-$i"
  sets=(--set "aggregator.endpoint=$endpoint" --set "node.id=$id" --set "node.key=keys/$id.key"
        --set "node.db=run/$id.db")
  if [[ $trainer == native ]]; then
    # fedmesh trains the same ONNX CNN itself: an IID quarter of Fashion-MNIST (fedmesh's own
    # shuffle, so not the very rows train.py picks), one compute thread like train.py.
    sets+=(--set "train.external=" --set data.dataset=fashion-mnist --set data.partition=iid
           --set "data.num_partitions=$sites" --set "data.index=$((i - 1))" --set train.threads=1)
  else
    sets+=(--set "train.external=/usr/bin/python3,$root/examples/pytorch/train.py,--model,fmnist_cnn,--sites,$sites,--index,$((i - 1))")
  fi
  "$bin/fedmesh-node" --config site.toml "${sets[@]}" >"$id.log" 2>&1 &
  pids+=("$!")
done

metrics=run/aggregator-metrics.jsonl
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
printf "\n%-6s %-9s %-9s %-13s %-7s\n" round accuracy loss participants wall_s
shown=0
while kill -0 "$agg" 2>/dev/null || [[ $shown -lt $(wc -l <"$metrics" 2>/dev/null || echo 0) ]]; do
  while [[ -f $metrics && $shown -lt $(wc -l <"$metrics") ]]; do
    shown=$((shown + 1))
    l=$(sed -n "${shown}p" "$metrics")
    printf "%-6s %-9.4f %-9.4f %-13s %-7.2f\n" "$(field round <<<"$l")" "$(field test_accuracy <<<"$l")" \
      "$(field test_loss <<<"$l")" "$(field received <<<"$l")/$(field selected <<<"$l")" "$(field wall_s <<<"$l")"
  done
  sleep 0.3
done
wait "$agg" && rc=0 || rc=$?
[[ $rc -eq 0 ]] || { echo "aggregator exited $rc; see $run/aggregator.log" >&2; tail -5 aggregator.log >&2; exit 1; }
echo "run folder: $run"
