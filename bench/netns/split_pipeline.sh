#!/usr/bin/env bash
# Split training's pipelining over a real delayed link (issue 22): the label party and the
# feature party of bench/split_training.cc as two processes in two network namespaces, over
# CurveZMQ, DELAY_MS (default 20) one way between them: tc netem where the kernel has it,
# else the user-space link emulator linkem.py (half the delay on each party's link, both
# ways; no rate limit). Then the three settings of the in-process bench: sequential, one
# micro-batch with the label party's own work overlapped, and 4 micro-batches, at two model
# sizes. Makes and removes namespaces fmsplit-*, uses only 10.77.0.0/24 inside them.
# EXTRA_ARGS (e.g. --sign: every message signed and verified, as fedmesh-node does) goes to
# both parties. Root only. Usage: sudo bash bench/netns/split_pipeline.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${FEDMESH_BUILD_DIR:-$root/build}/bench/fedmesh_split_training
delay_ms=${DELAY_MS:-20}
[[ $(id -u) -eq 0 ]] || { echo "split_pipeline.sh: run as root (it makes network namespaces)" >&2; exit 2; }
[[ -x $bin ]] || { echo "split_pipeline.sh: build first ($bin)" >&2; exit 2; }
source "$root/bench/netns/lib.sh"
log=$(mktemp)
cleanup() {
  [[ -n $LINKEM_PID ]] && kill "$LINKEM_PID" 2>/dev/null || true
  netns_delete fmsplit
  rm -f "$log"
}
trap cleanup EXIT
hosts=(label=10.77.0.1 feature=10.77.0.2)
if netns_has_netem; then
  netns_bridged fmsplit "${hosts[@]}"
  for h in label feature; do ip netns exec "fmsplit-$h" tc qdisc add dev "v-$h" root netem delay "${delay_ms}ms"; done
  echo "link: ${delay_ms} ms one way (netem)"
else
  half=$(awk -v d="$delay_ms" 'BEGIN { printf "%g", d / 2 }')
  netns_emulated fmsplit "$log" "$half" 0 0 "${hosts[@]}"
  echo "link: ${delay_ms} ms one way (user-space linkem.py, ${half} ms on each party's link each way: this kernel has no sch_netem)"
fi
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%F)"
peers=10.77.0.1:7400,10.77.0.2:7400
for size in "--hidden 1024 --label-hidden 1024 --batch 1024" "--hidden 4096 --label-hidden 4096 --batch 2048"; do
  echo "== $size"
  # shellcheck disable=SC2086
  ip netns exec fmsplit-feature env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    "$bin" --mode pipeline --party feature --peers "$peers" --rows 30000 --steps "${STEPS:-20}" --microbatches 4 $size ${EXTRA_ARGS:-} &
  feature=$!
  # shellcheck disable=SC2086
  ip netns exec fmsplit-label env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    "$bin" --mode pipeline --party label --peers "$peers" --rows 30000 --steps "${STEPS:-20}" --microbatches 4 $size ${EXTRA_ARGS:-}
  wait "$feature"
done
[[ -n $LINKEM_PID ]] && netns_stop_emulator "$log"
exit 0
