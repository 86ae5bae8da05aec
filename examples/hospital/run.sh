#!/usr/bin/env bash
# Five hospitals and a coordinator on this machine (127.0.0.1, CurveZMQ), secure
# aggregation on: builds if needed, makes the keys, runs 5 rounds and prints each round.
# Usage: examples/hospital/run.sh [--set section.key=value ...]   (passed to the coordinator,
# e.g. --set dp.mode=distributed --set dp.noise_multiplier=1)
# Environment: HOSPITAL_RUN_DIR (runs/hospital-<time>).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/lib.sh"
build=${FEDMESH_BUILD_DIR:-$root/build}
bin="$build/bin"
[[ -x "$bin/fedmesh-node" && -x "$bin/fedmesh-aggregator" ]] ||
  FEDMESH_TARGETS="fedmesh-node fedmesh-aggregator fedmesh-keys" "$root/scripts/build.sh"
export OMP_WAIT_POLICY=passive
run=${HOSPITAL_RUN_DIR:-$root/runs/hospital-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$run/run" && mkdir -p -m 755 "$run/keys/allow"  # refused if group-writable
cd "$run"
cp "$root"/examples/hospital/*.toml .
"$bin/fedmesh-keys" gen --out keys/coordinator >/dev/null
for i in 1 2 3 4 5; do
  "$bin/fedmesh-keys" gen --out "keys/hospital-$i" >/dev/null
  cp "keys/hospital-$i.pub" keys/allow/
done

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$bin/fedmesh-aggregator" --config aggregator.toml --set "aggregator.listen=tcp://127.0.0.1:*" \
  "$@" >coordinator.log 2>&1 &
agg=$!
pids+=("$agg")
endpoint=$(wait_for_endpoint coordinator.log "$agg") || { echo "the coordinator did not start" >&2; exit 1; }
echo "== coordinator on $endpoint, 5 hospitals, secure aggregation (logs in $run) =="
for i in 1 2 3 4 5; do
  "$bin/fedmesh-node" --config hospital.toml --set "aggregator.endpoint=$endpoint" \
    --set "node.id=hospital-$i" --set "node.key=keys/hospital-$i.key" \
    --set "node.db=run/hospital-$i.db" --set "data.index=$((i - 1))" >"hospital-$i.log" 2>&1 &
  pids+=("$!")
done
wait "$agg"
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
printf "\n%-6s %-9s %-14s %-16s %-8s\n" round accuracy contributors masked_bytes_up epsilon
while IFS= read -r l; do
  eps=$(field epsilon <<<"$l")
  printf "%-6s %-9.4f %-14s %-16s %-8s\n" "$(field round <<<"$l")" "$(field test_accuracy <<<"$l")" \
    "$(field received <<<"$l")/$(field selected <<<"$l")" "$(field bytes_up <<<"$l")" "${eps:--}"
done <run/coordinator-metrics.jsonl
echo
grep -h "sent the masked update\|secure aggregation done" hospital-1.log | tail -2
echo "run folder: $run"
