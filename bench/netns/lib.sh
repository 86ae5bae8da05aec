# Network namespaces for the benches in this folder (sourced, not run). Every function takes
# the PREFIX of the namespaces it makes (fmfed, fmring, ...) and hosts as NAME=ADDRESS (an
# address in a /24 that only these namespaces use). Host NAME lives in namespace PREFIX-NAME
# with its link device v-NAME. Root only.

# netns_delete PREFIX: removes every namespace PREFIX-* (what the functions below made).
netns_delete() {
  local ns
  for ns in $(ip netns list | awk -v p="^$1-" '$1 ~ p {print $1}'); do ip netns del "$ns" 2>/dev/null || true; done
}

# netns_bridged PREFIX NAME=ADDR...: each host's veth v-NAME into bridge br0 in namespace
# PREFIX-br (its other end p-NAME). Shape a host's link with tc on v-NAME (uplink) and, in
# PREFIX-br, on p-NAME (downlink).
netns_bridged() {
  local prefix=$1 spec name addr
  shift
  netns_delete "$prefix"
  ip netns add "$prefix-br"
  ip -n "$prefix-br" link add br0 type bridge
  ip -n "$prefix-br" link set br0 up
  for spec in "$@"; do
    name=${spec%%=*} addr=${spec#*=}
    ip netns add "$prefix-$name"
    ip link add "v-$name" type veth peer name "p-$name"
    ip link set "v-$name" netns "$prefix-$name"
    ip link set "p-$name" netns "$prefix-br"
    ip -n "$prefix-br" link set "p-$name" master br0 up
    ip -n "$prefix-$name" addr add "$addr/24" dev "v-$name"
    ip -n "$prefix-$name" link set "v-$name" up
    ip -n "$prefix-$name" link set lo up
  done
}

# netns_emulated PREFIX LOG DELAY_MS LOSS_PCT RATE_MBIT NAME=ADDR...: each host's TAP device
# v-NAME, switched in user space by linkem.py (in the background; its pid in LINKEM_PID,
# its counters in LOG when it stops) with that rate, delay and loss on every host's link,
# each way, plus uniform jitter of up to $JITTER_MS (default 0) per crossing: delay and loss
# where the kernel has no sch_netem. $LINK_MTU (default 1500) sets the TAP devices' MTU: a
# jumbo MTU (up to 65000) cuts the frames the emulator must switch per byte ~40-fold, which is
# what lets one Python process carry several 1 Gbit/s links (rate and delay are unchanged).
LINKEM_PID=""
netns_emulated() {
  local prefix=$1 log=$2 delay=$3 loss=$4 rate=$5 spec name addr ports=()
  shift 5
  netns_delete "$prefix"
  loss=$(awk -v p="$loss" 'BEGIN { printf "%g", p / 100 }')
  for spec in "$@"; do
    name=${spec%%=*} addr=${spec#*=}
    ip netns add "$prefix-$name"
    ip netns exec "$prefix-$name" ip tuntap add dev "v-$name" mode tap
    ip -n "$prefix-$name" link set "v-$name" mtu "${LINK_MTU:-1500}"
    ip -n "$prefix-$name" addr add "$addr/24" dev "v-$name"
    ip -n "$prefix-$name" link set "v-$name" up
    ip -n "$prefix-$name" link set lo up
    ports+=(--port "$prefix-$name:v-$name:$delay:$loss:$rate")
  done
  python3 "$(dirname "${BASH_SOURCE[0]}")/linkem.py" "${ports[@]}" --jitter-ms "${JITTER_MS:-0}" 2>"$log" &
  LINKEM_PID=$!
  sleep 1
}

# netns_stop_emulator LOG: stops linkem.py and prints its per-link counters.
netns_stop_emulator() {
  [[ -n $LINKEM_PID ]] || return 0
  kill "$LINKEM_PID" 2>/dev/null || true
  wait "$LINKEM_PID" 2>/dev/null || true
  grep -v switching "$1" | sed 's/^/  /' || true
  LINKEM_PID=""
}

# netns_has_netem: whether this kernel has sch_netem (probed in a scratch namespace).
netns_has_netem() {
  local ok=1
  ip netns add fmprobe-netem
  ip -n fmprobe-netem link set lo up
  ip netns exec fmprobe-netem tc qdisc add dev lo root netem delay 1ms 2>/dev/null && ok=0
  ip netns del fmprobe-netem
  return $ok
}
