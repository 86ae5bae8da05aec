#!/usr/bin/env bash
# Ring all-reduce across network namespaces (issue 21): N ranks, each in its own namespace
# with one veth into a bridge (in a namespace of its own), each rank's uplink shaped to RATE
# with a token bucket (tc tbf); then fedmesh's all-reduce of BYTES, CurveZMQ off and on,
# against the ring's bandwidth bound 2 (N - 1) / N x BYTES / RATE. Makes and removes
# everything it creates (namespaces fmring-*), uses only 10.78.0.0/24 inside them.
# Root only. Usage: sudo bench/netns/collective_ring.sh [N=4] [RATE_MBIT=1000] [BYTES=104857600]
# Delay/jitter/loss need sch_netem; where the kernel lacks it (this VM) the script says so
# and shapes the rate alone.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${FEDMESH_BUILD_DIR:-$root/build}/bench/fedmesh_collective_allreduce
n=${1:-4}
rate_mbit=${2:-1000}
bytes=${3:-104857600}
delay_ms=${DELAY_MS:-5}
[[ $(id -u) -eq 0 ]] || { echo "collective_ring.sh: run as root (it makes network namespaces)" >&2; exit 2; }
[[ -x $bin ]] || { echo "collective_ring.sh: build first ($bin)" >&2; exit 2; }
cleanup() {
  for ns in $(ip netns list | awk '/^fmring-/{print $1}'); do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
ip netns add fmring-br
ip -n fmring-br link add br0 type bridge
ip -n fmring-br link set br0 up
group=""
for ((i = 0; i < n; i++)); do
  ns=fmring-$i
  ip netns add "$ns"
  ip link add "veth$i" type veth peer name "port$i"
  ip link set "veth$i" netns "$ns"
  ip link set "port$i" netns fmring-br
  ip -n fmring-br link set "port$i" master br0 up
  ip -n "$ns" addr add "10.78.0.$((i + 1))/24" dev "veth$i"
  ip -n "$ns" link set "veth$i" up
  ip -n "$ns" link set lo up
  group+="${group:+,}10.78.0.$((i + 1)):7300"
done
shaping="tbf rate ${rate_mbit}mbit burst 1mb latency 100ms"
netem=0
if ip netns exec fmring-0 tc qdisc add dev veth0 root netem delay "${delay_ms}ms" rate "${rate_mbit}mbit" 2>/dev/null; then
  netem=1
  ip netns exec fmring-0 tc qdisc del dev veth0 root
fi
for ((i = 0; i < n; i++)); do
  if ((netem)); then
    ip netns exec "fmring-$i" tc qdisc add dev "veth$i" root netem delay "${delay_ms}ms" rate "${rate_mbit}mbit" limit 100000
  else
    ip netns exec "fmring-$i" tc qdisc add dev "veth$i" root $shaping
  fi
done
if ((netem)); then
  echo "links: ${rate_mbit} Mbit/s and ${delay_ms} ms (netem) on each rank's uplink"
else
  echo "links: ${rate_mbit} Mbit/s (tbf) on each rank's uplink; NO delay: this kernel has no sch_netem"
fi
bound=$(awk -v n="$n" -v b="$bytes" -v r="$rate_mbit" 'BEGIN { printf "%.4f", 2 * (n - 1) / n * b / (r * 1e6 / 8) }')
for impl in fedmesh-plain fedmesh; do
  out=$(mktemp)
  for ((i = 0; i < n; i++)); do
    ip netns exec "fmring-$i" "$bin" --impl "$impl" --rank "$i" --group "$group" --sizes "$bytes" >>"$out" &
  done
  wait
  line=$(cat "$out")
  rm -f "$out"
  secs=$(awk '{print $4}' <<<"$line")
  echo "$line"
  awk -v s="$secs" -v b="$bound" -v i="$impl" 'BEGIN { printf "%s: %.3f s; ring bound %.3f s; achieved %.2fx of the bound rate\n", i, s, b, b / s }'
done
