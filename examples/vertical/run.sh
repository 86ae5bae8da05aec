#!/usr/bin/env bash
# Vertical federated learning on breast cancer data, with one command on a fresh machine:
# installs what is missing (Debian's python3-sklearn for the data), builds fedmesh, cuts the
# Wisconsin data by columns between a hospital (diagnosis + 10 measurements) and a lab (20
# other measurements), each holding patients the other lacks (split.sh), then runs both
# parties as fedmesh-node processes on 127.0.0.1 in [train] mode = "split": private set
# intersection of the patient ids over CurveZMQ, then split training of one model cut in
# three (each party's bottom, the hospital's top), pipelined in 4 micro-batches. Prints the
# hospital's test metrics per epoch and exports each party's trained part as ONNX.
# Environment: RUN_DIR (runs/vertical-<time>), EPOCHS (30), FEDMESH_BUILD_DIR (build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root/scripts/lib.sh"
here="$root/examples/vertical"
build=${FEDMESH_BUILD_DIR:-$root/build}
bin="$build/bin"
epochs=${EPOCHS:-30}
"$root/scripts/setup.sh"
ensure_package python3-sklearn "the Wisconsin breast cancer CSV"
"$root/scripts/build.sh" >/dev/null
run=${RUN_DIR:-$root/runs/vertical-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$run" && cd "$run"
mkdir -p run data
"$here/split.sh" data
mkdir -p -m 755 keys/allow
for who in hospital lab; do
  "$bin/fedmesh-keys" gen --out "keys/$who" >/dev/null
  cp "keys/$who.pub" keys/allow/
done
cp "$here"/hospital.toml "$here"/lab.toml "$here"/*.onnx .
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
hp=$(port) && lp=$(port)
peers="split.peers=hospital@tcp://127.0.0.1:$hp,lab@tcp://127.0.0.1:$lp"
export OMP_WAIT_POLICY=passive
echo "== PSI + split training, $epochs epochs (logs in $run) =="
"$bin/fedmesh-node" --config lab.toml --set "split.listen=tcp://127.0.0.1:$lp" --set "$peers" >lab.log 2>&1 &
lab=$!
"$bin/fedmesh-node" --config hospital.toml --set "split.listen=tcp://127.0.0.1:$hp" --set "$peers" \
  --set "train.epochs=$epochs" >hospital.log 2>&1 && rc=0 || rc=$?
wait "$lab" && lrc=0 || lrc=$?
[[ $rc -eq 0 && $lrc -eq 0 ]] || { echo "hospital exited $rc, lab $lrc; see $run/*.log" >&2; tail -n 3 hospital.log lab.log >&2; exit 1; }
grep -h "psi:" hospital.log lab.log | sed 's/^.*\] //'
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
printf "\n%-6s %-10s %-13s %-9s %-9s %-13s\n" epoch train_loss test_accuracy test_auc idle step_ms
while read -r line; do
  printf "%-6s %-10.4f %-13.4f %-9.4f %-9.3f %-13.2f\n" "$(field epoch <<<"$line")" "$(field train_loss <<<"$line")" \
    "$(field test_accuracy <<<"$line")" "$(field test_auc <<<"$line")" "$(field idle_fraction <<<"$line")" \
    "$(field step_ms <<<"$line")"
done <run/hospital-metrics.jsonl
"$bin/fedmesh-model" export --db run/hospital.db --out hospital_part.onnx >/dev/null 2>&1
"$bin/fedmesh-model" export --db run/hospital.db --part top --out top_part.onnx >/dev/null 2>&1
"$bin/fedmesh-model" export --db run/lab.db --out lab_part.onnx >/dev/null 2>&1
echo "trained parts: $run/hospital_part.onnx, $run/top_part.onnx (hospital), $run/lab_part.onnx (lab)"
[[ -f whole_model.onnx ]] && echo "whole model (the lab consented): $run/whole_model.onnx, input: the hospital's 10 columns, then the lab's 20"
