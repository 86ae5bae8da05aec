#!/usr/bin/env bash
# Ring all-reduce across network namespaces (issue 21): N ranks, each in its own namespace
# with one link (a veth into a bridge, or a TAP of linkem.py), each rank's link shaped to
# RATE; then fedmesh's all-reduce of BYTES, CurveZMQ off and on,
# against the ring's bandwidth bound 2 (N - 1) / N x BYTES / RATE. Makes and removes
# everything it creates (namespaces fmring-*), uses only 10.78.0.0/24 inside them.
# Root only. Usage: sudo bench/netns/collective_ring.sh [N=4] [RATE_MBIT=1000] [BYTES=104857600]
# The delay (DELAY_MS, default 5) needs sch_netem; where the kernel lacks it (this VM) the
# ranks sit behind TAP devices switched by the user-space emulator linkem.py instead
# (LINKEM=0: rate alone, tc tbf).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${FEDMESH_BUILD_DIR:-$root/build}/bench/fedmesh_collective_allreduce
n=${1:-4}
rate_mbit=${2:-1000}
bytes=${3:-104857600}
delay_ms=${DELAY_MS:-5}
[[ $(id -u) -eq 0 ]] || { echo "collective_ring.sh: run as root (it makes network namespaces)" >&2; exit 2; }
[[ -x $bin ]] || { echo "collective_ring.sh: build first ($bin)" >&2; exit 2; }
source "$root/bench/netns/lib.sh"
cleanup() {
  [[ -n $LINKEM_PID ]] && kill "$LINKEM_PID" 2>/dev/null || true
  netns_delete fmring
}
trap cleanup EXIT
hosts=() group=""
for ((i = 0; i < n; i++)); do
  hosts+=("$i=10.78.0.$((i + 1))")
  group+="${group:+,}10.78.0.$((i + 1)):7300"
done
if netns_has_netem; then
  netns_bridged fmring "${hosts[@]}"
  for ((i = 0; i < n; i++)); do
    ip netns exec "fmring-$i" tc qdisc add dev "v-$i" root netem delay "${delay_ms}ms" rate "${rate_mbit}mbit" limit 100000
  done
  echo "links: ${rate_mbit} Mbit/s and ${delay_ms} ms (netem) on each rank's uplink"
elif [[ ${LINKEM:-1} == 1 ]]; then
  # Delay from the user-space emulator, on each rank's link both ways: one way rank to rank
  # is 2 x DELAY_MS/2 = DELAY_MS. With 1500-byte frames it forwards about 900 Mbit/s in all
  # on this VM; with the jumbo MTU used here by default (LINK_MTU=65000) it carries 4 x 1
  # Gbit/s (rate and delay are per byte and per frame as before; only the frame count drops).
  export LINK_MTU=${LINK_MTU:-65000}
  log=$(mktemp)
  half=$(awk -v d="$delay_ms" 'BEGIN { printf "%g", d / 2 }')
  netns_emulated fmring "$log" "$half" 0 "$rate_mbit" "${hosts[@]}"
  echo "links: ${rate_mbit} Mbit/s each way on each rank's link, ${delay_ms} ms one way rank to rank (user-space linkem.py: this kernel has no sch_netem)"
else
  netns_bridged fmring "${hosts[@]}"
  for ((i = 0; i < n; i++)); do
    ip netns exec "fmring-$i" tc qdisc add dev "v-$i" root tbf rate "${rate_mbit}mbit" burst 1mb latency 100ms
  done
  echo "links: ${rate_mbit} Mbit/s (tbf) on each rank's uplink; NO delay: this kernel has no sch_netem (LINKEM=0)"
fi
echo "TCP congestion control: $(ip netns exec fmring-0 sysctl -n net.ipv4.tcp_congestion_control); link MTU ${LINK_MTU:-1500}"
bound=$(awk -v n="$n" -v b="$bytes" -v r="$rate_mbit" 'BEGIN { printf "%.4f", 2 * (n - 1) / n * b / (r * 1e6 / 8) }')
for impl in fedmesh-plain fedmesh; do
  out=$(mktemp) ranks=()
  for ((i = 0; i < n; i++)); do
    ip netns exec "fmring-$i" "$bin" --impl "$impl" --rank "$i" --group "$group" --sizes "$bytes" >>"$out" &
    ranks+=($!)
  done
  wait "${ranks[@]}"  # not the emulator
  line=$(cat "$out")
  rm -f "$out"
  secs=$(awk '{print $4}' <<<"$line")
  echo "$line"
  awk -v s="$secs" -v b="$bound" -v i="$impl" 'BEGIN { printf "%s: %.3f s; ring bound %.3f s; achieved %.2fx of the bound rate\n", i, s, b, b / s }'
done
[[ -n $LINKEM_PID ]] && netns_stop_emulator "$log"
exit 0
