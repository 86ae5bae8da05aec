#!/usr/bin/env bash
# Federated evaluation's cost against a fit round (issue 19), from one real federation:
# scripts/demo.sh (1 aggregator + 4 fedmesh-node processes on 127.0.0.1, Fashion-MNIST
# Dirichlet(0.5) quarters, mlp) with [eval] federated = true and no central test set. Prints,
# per round, the fit round's wall time and downlink bytes beside the evaluation's (tasks sent
# to all 4 sites until the last answer), and the means and their ratio. The evaluation
# overlaps the next round's training on the same 2 cores, so its wall time includes waiting
# for sites that are training.
#   bench/federated_eval_cost.sh          # ROUNDS (10), BUILD (build), RUN_DIR (BUILD/bench-fedeval)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
run=${RUN_DIR:-$build/bench-fedeval}
rm -rf "$run"
DEMO_ROUNDS=${ROUNDS:-10} DEMO_RUN_DIR="$run" DEMO_AGG_SETS="eval.federated=true eval.dataset=" \
  FEDMESH_BUILD_DIR="$build" "$root/scripts/demo.sh" >"$run.log" 2>&1 || { cat "$run.log" >&2; exit 1; }
metrics="$run/run/aggregator-metrics.jsonl"
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
printf "%-6s %-11s %-12s %-11s %-12s %-9s\n" round fit_wall_s fit_bytes_dn eval_wall_s eval_bytes_dn eval_acc
awk_in=()
while read -r l; do
  r=$(field round <<<"$l")
  if [[ $l != *'"federated_eval":true'* ]]; then
    fit_s[$r]=$(field wall_s <<<"$l"); fit_b[$r]=$(field bytes_down <<<"$l")
  elif [[ $l == *'"site":"*"'* ]]; then
    ev_s[$r]=$(field wall_s <<<"$l"); ev_b[$r]=$(field bytes_down <<<"$l"); ev_a[$r]=$(field accuracy <<<"$l")
  fi
done <"$metrics"
for r in "${!fit_s[@]}"; do
  printf "%-6s %-11.3f %-12s %-11.3f %-12s %-9.4f\n" "$r" "${fit_s[$r]}" "${fit_b[$r]}" "${ev_s[$r]:-nan}" \
    "${ev_b[$r]:-0}" "${ev_a[$r]:-nan}"
  awk_in+=("${fit_s[$r]} ${ev_s[$r]:-0} ${fit_b[$r]} ${ev_b[$r]:-0}")
done
printf "%s\n" "${awk_in[@]}" | awk '{ fs += $1; es += $2; fb += $3; eb += $4; n++ }
  END { printf "mean: fit round %.3f s, evaluation %.3f s (%.2fx); downlink per round %.0f B fit, %.0f B evaluation (%.2fx)\n",
        fs / n, es / n, es / fs, fb / n, eb / n, eb / fb }'
echo "run folder: $run"
