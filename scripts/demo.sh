#!/usr/bin/env bash
# The main job, from a fresh machine: install what is missing, build, then run a real
# federation on this machine: one fedmesh-aggregator and four fedmesh-node processes on
# 127.0.0.1 (CurveZMQ, keys made by fedmesh-keys), each node holding a Dirichlet(0.5)
# label-skewed quarter of Fashion-MNIST, training an mlp for 10 rounds of FedAvg.
# Prints one row per round and leaves keys, SQLite stores, logs and metrics in a run folder.
# Environment: DEMO_ROUNDS (10), DEMO_RUN_DIR (runs/demo-<time>), DEMO_MODE=local for the
# single-site local-training demo instead, DEMO_AGG_SETS (extra aggregator --set values,
# space separated, e.g. "eval.federated=true eval.dataset=" for federated evaluation only).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$root/scripts/lib.sh"
build=${FEDMESH_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
FEDMESH_TARGETS="fedmesh-node fedmesh-aggregator fedmesh-keys" "$root/scripts/build.sh"
bin="$build/bin"
# Nodes and the aggregator share 2 cores here: passive OpenMP waiting keeps them from
# spinning against each other (bench/RESULTS.md, "OpenMP wait policy").
export OMP_WAIT_POLICY=passive
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
# A JSON null (no central test set) printed as nan rather than failing printf.
num() { local v; v=$(field "$1"); echo "${v/null/nan}"; }

run=${DEMO_RUN_DIR:-$root/runs/demo-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$run"

if [[ "${DEMO_MODE:-federation}" == "local" ]]; then
  "$bin/fedmesh-node" --local-only --node-id demo --model mlp --data fashion-mnist --epochs 3 \
    --batch 32 --lr 0.01 --momentum 0.9 --metrics "$run/metrics.jsonl"
  printf "\n%-6s %-10s %-10s\n" epoch test_acc test_loss
  while IFS= read -r l; do
    printf "%-6s %-10.4f %-10.4f\n" "$(field epoch <<<"$l")" "$(field test_accuracy <<<"$l")" "$(field test_loss <<<"$l")"
  done < "$run/metrics.jsonl"
  echo "run folder: $run"
  exit 0
fi

rounds=${DEMO_ROUNDS:-10}
# Codec chain every node encodes its update with (docs/codecs.md), e.g.
# DEMO_CODEC='topk:0.01|int8|zstd'; "none" sends raw float32.
codec=${DEMO_CODEC:-none}
cd "$run"
mkdir -p run && mkdir -p -m 755 keys/allow  # the aggregator refuses a group-writable allowlist
for who in aggregator site-1 site-2 site-3 site-4; do "$bin/fedmesh-keys" gen --out "keys/$who" >/dev/null; done
cp keys/site-*.pub keys/allow/
cp "$root"/examples/fashion-mnist/*.toml .

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

echo "== federation: 1 aggregator + 4 nodes on 127.0.0.1, $rounds rounds, update codec $codec (logs in $run) =="
agg_sets=()
for kv in ${DEMO_AGG_SETS:-}; do agg_sets+=(--set "$kv"); done
"$bin/fedmesh-aggregator" --config aggregator.toml --set "aggregator.listen=tcp://127.0.0.1:*" \
  --set "rounds.total=$rounds" "${agg_sets[@]}" >aggregator.log 2>&1 &
agg=$!
pids+=("$agg")
endpoint=$(wait_for_endpoint aggregator.log "$agg") || { echo "aggregator did not start" >&2; exit 1; }
for i in 1 2 3 4; do
  "$bin/fedmesh-node" --config "node$i.toml" --set "aggregator.endpoint=$endpoint" \
    --set train.threads=1 --set "codec.chain=$codec" >"site-$i.log" 2>&1 &
  pids+=("$!")
done

metrics=run/aggregator-metrics.jsonl
printf "\n%-6s %-9s %-9s %-13s %-11s %-9s %-11s %-7s\n" round accuracy loss participants bytes_up ratio bytes_down wall_s
shown=0
while kill -0 "$agg" 2>/dev/null || [[ $shown -lt $(wc -l <"$metrics" 2>/dev/null || echo 0) ]]; do
  if [[ -f "$metrics" ]]; then
    while [[ $shown -lt $(wc -l <"$metrics") ]]; do
      shown=$((shown + 1))
      l=$(sed -n "${shown}p" "$metrics")
      if [[ $l == *'"federated_eval":true'* ]]; then  # docs/evaluation.md
        [[ $l == *'"site":"*"'* ]] && printf "       federated evaluation: %s/%s sites, accuracy %s, loss %s, %.2f s\n" \
          "$(field sites_answered <<<"$l")" "$(field sites_asked <<<"$l")" \
          "$(field accuracy <<<"$l")" "$(field loss <<<"$l")" "$(field wall_s <<<"$l")"
        continue
      fi
      printf "%-6s %-9.4f %-9.4f %-13s %-11s %-9.1f %-11s %-7.2f\n" "$(field round <<<"$l")" \
        "$(num test_accuracy <<<"$l")" "$(num test_loss <<<"$l")" \
        "$(field received <<<"$l")/$(field selected <<<"$l")" "$(field bytes_up <<<"$l")" \
        "$(field compression_ratio <<<"$l")" "$(field bytes_down <<<"$l")" "$(field wall_s <<<"$l")"
    done
  fi
  sleep 0.3
done
wait "$agg" && rc=0 || rc=$?
if [[ $rc -ne 0 ]]; then echo "aggregator exited $rc; see $run/aggregator.log" >&2; tail -5 aggregator.log >&2; exit 1; fi
echo
echo "run folder: $run"
echo "  aggregator store: $run/run/aggregator.db    metrics: $run/$metrics"
echo "  node stores: $run/run/site-{1..4}.db    logs: $run/*.log    keys: $run/keys/"
