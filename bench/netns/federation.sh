#!/usr/bin/env bash
# A federation and a gossip group across network namespaces (issue 24): the aggregator and
# each site (or each gossip peer) in a namespace of its own, joined by veth pairs to a
# bridge in another namespace, each uplink shaped with tc. Real fedmesh-aggregator /
# fedmesh-node binaries, CurveZMQ on, Fashion-MNIST, the mlp.
#
#   links      the federation over shaped links (RATE_MBIT, default 100, DELAY_MS=50,
#              JITTER_MS=0 and LOSS_PCT=1 on every host's link, each way: with sch_netem where the kernel
#              has it, else through the user-space emulator bench/netns/linkem.py on TAP
#              devices), then the same over unshaped links: rounds and wall time side by side.
#   partition  site-4's link goes down after round 1 closes and comes back after round 3
#              (10 rounds, 3 local epochs): every round closes (quorum 3 of 4 at the
#              deadline), site-4 rejoins and contributes again.
#   gossip     4 D-PSGD peers, peer 4 behind a SLOW_MBIT (default 10; 0 = unshaped) link:
#              steps, accuracy, bytes and the live view per peer.
#   resume     2 sites; site-2 behind an UPLOAD_MBIT (default 1) link sends its update in
#              64 KiB chunks, and its link goes down CUT_AFTER_S (default 4) s into the
#              upload for CUT_S (default 12) s. Run twice: with the aggregator keeping the
#              partial upload (resumed), and with upload_idle_timeout_s = 1 (the partial
#              copy is dropped, the update is sent whole again). Bytes site-2 put on its
#              link in each, from the veth's counters.
#
# Makes and removes everything it creates (namespaces fmfed-*), uses only 10.79.0.0/24
# inside them. Root only. Usage: sudo bench/netns/federation.sh [links|partition|gossip|resume|all]
# Delay and loss need the kernel's sch_netem; where it is missing (the VM these figures were
# taken on) `links` emulates them in user space (linkem.py) and the other modes shape the
# rate alone (tbf).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${FEDMESH_BUILD_DIR:-$root/build}/bin
what=${1:-all}
rate_mbit=${RATE_MBIT:-100}
delay_ms=${DELAY_MS:-50}
loss_pct=${LOSS_PCT:-1}
[[ $(id -u) -eq 0 ]] || { echo "federation.sh: run as root (it makes network namespaces)" >&2; exit 2; }
for b in fedmesh-aggregator fedmesh-node fedmesh-keys; do
  [[ -x $bin/$b ]] || { echo "federation.sh: build first ($bin/$b)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/fmfed.XXXXXX)
pids=()
agg_pid=""
wall=0
cleanup() {
  for p in "${pids[@]:-}"; do [[ -n $p ]] && kill -9 "$p" 2>/dev/null || true; done
  netns_delete fmfed
  [[ -n ${KEEP:-} ]] || rm -rf "$work"
}
trap cleanup EXIT

source "$root/bench/netns/lib.sh"
netem_ok=0
netns_has_netem && netem_ok=1

# Hosts: "agg" = 10.79.0.1, "s1".."s4" = 10.79.0.11..14.
hosts() {
  local h
  for h in "$@"; do
    [[ $h == agg ]] && echo "agg=10.79.0.1" || echo "$h=10.79.0.$((10 + ${h#s}))"
  done
}
make_net() { netns_bridged fmfed $(hosts "$@"); }
# The same hosts behind TAP devices that linkem.py switches with RATE_MBIT, DELAY_MS and
# LOSS_PCT on every host's link, both ways.
make_net_emulated() {
  netns_emulated fmfed "$work/linkem.log" "$delay_ms" "$loss_pct" "$rate_mbit" $(hosts "$@")
  pids+=("$LINKEM_PID")
}
stop_linkem() { netns_stop_emulator "$work/linkem.log"; }

# shape HOST RATE_MBIT: the host's uplink (and, on the bridge side, its downlink).
shape() {
  local host=$1 rate=$2
  for side in "fmfed-$host v-$host" "fmfed-br p-$host"; do
    set -- $side
    if ((netem_ok)); then
      ip netns exec "$1" tc qdisc replace dev "$2" root netem delay "${delay_ms}ms" "${JITTER_MS:-0}ms" loss "${loss_pct}%" \
        rate "${rate}mbit" limit 100000
    else
      ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "${rate}mbit" burst 1mb latency 200ms
    fi
  done
}

keys() {
  mkdir -p "$work/keys/allow" "$work/run"
  for n in aggregator "$@"; do
    (cd "$work" && "$bin/fedmesh-keys" gen --out "keys/$n" >/dev/null)
  done
  for n in "$@"; do cp "$work/keys/$n.pub" "$work/keys/allow/"; done
}

start() {  # start NAME NS ARGS...: a binary in a namespace, cwd $work, log run/NAME.log
  local name=$1 ns=$2
  shift 2
  (cd "$work" && exec ip netns exec "fmfed-$ns" env OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive "$@" \
    >"run/$name.log" 2>&1) &
  pids+=($!)
}

rounds_closed() { [[ -f $work/run/aggregator-metrics.jsonl ]] && wc -l <"$work/run/aggregator-metrics.jsonl" || echo 0; }

wait_rounds() {  # wait_rounds N TIMEOUT_S
  local deadline=$((SECONDS + $2))
  while (($(rounds_closed) < $1)); do
    ((SECONDS < deadline)) || { echo "timed out waiting for round $1"; tail -5 "$work/run/aggregator.log"; exit 1; }
    sleep 0.5
  done
}

federation() {  # federation TOTAL_ROUNDS EPOCHS: the aggregator and 4 sites, started
  rm -rf "$work/run" && mkdir -p "$work/run"
  cp "$root"/examples/fashion-mnist/*.toml "$work/"
  start aggregator agg "$bin/fedmesh-aggregator" --config aggregator.toml \
    --set aggregator.listen=tcp://10.79.0.1:5555 --set "rounds.total=$1" --set rounds.min_clients=3 \
    --set "train.epochs=$2" \
    --set rounds.timeout_s=30 --set aggregator.heartbeat_ms=1000
  agg_pid=${pids[-1]}
  for i in 1 2 3 4; do
    start "site-$i" "s$i" "$bin/fedmesh-node" --config "node$i.toml" \
      --set aggregator.endpoint=tcp://10.79.0.1:5555 --set train.threads=1
  done
}

finish_federation() {  # finish_federation T0: wait for the aggregator, stop the sites; sets wall
  wait "$agg_pid" || { echo "aggregator failed"; tail -20 "$work/run/aggregator.log"; exit 1; }
  wall=$((SECONDS - $1))
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

summary() {  # per round: received, wall_s, test accuracy
  awk -F'[:,]' '{for (i = 1; i < NF; i++) { gsub(/[" {}]/, "", $i); v[$i] = $(i + 1) }
                 printf "  round %s: %s/%s updates, %.2f s, test accuracy %.4f\n", v["round"], v["received"], v["selected"], v["wall_s"], v["test_accuracy"]}' \
    "$work/run/aggregator-metrics.jsonl"
}

run_links() {
  keys site-1 site-2 site-3 site-4
  local label
  for shaped in 1 0; do
    if ((shaped)) && ((netem_ok)); then
      make_net agg s1 s2 s3 s4
      for h in agg s1 s2 s3 s4; do shape "$h" "$rate_mbit"; done
      label="${rate_mbit} Mbit/s, ${delay_ms} ms (jitter ${JITTER_MS:-0} ms), ${loss_pct}% loss on every link, each way (netem)"
    elif ((shaped)); then
      make_net_emulated agg s1 s2 s3 s4
      label="${rate_mbit} Mbit/s, ${delay_ms} ms (jitter ${JITTER_MS:-0} ms), ${loss_pct}% loss on every link, each way (user-space linkem.py: this kernel has no sch_netem)"
    else
      make_net agg s1 s2 s3 s4
      label="unshaped veth"
    fi
    local t0=$SECONDS
    federation 5 1
    finish_federation "$t0"
    echo "links: $label: 5 rounds in ${wall} s"
    summary
    stop_linkem
  done
}

run_partition() {
  make_net agg s1 s2 s3 s4
  keys site-1 site-2 site-3 site-4
  local t0=$SECONDS
  federation 10 3
  wait_rounds 1 300
  ip -n fmfed-s4 link set v-s4 down
  echo "partition: site-4's link down after round 1 (t=$((SECONDS - t0)) s)"
  wait_rounds 3 300
  ip -n fmfed-s4 link set v-s4 up
  echo "partition: site-4's link up after round 3 (t=$((SECONDS - t0)) s)"
  finish_federation "$t0"
  echo "partition: 10 rounds in ${wall} s"
  summary
  echo "  site-4's updates accepted in rounds: $(grep -o 'round [0-9]*: accepted update from site-4' "$work/run/aggregator.log" | awk '{printf "%s ", $2+0}')"
  grep -c "registered with the aggregator" "$work/run/site-4.log" | xargs echo "  site-4 registrations:"
}

run_gossip() {
  make_net s1 s2 s3 s4
  keys site-1 site-2 site-3 site-4
  rm -rf "$work/run" && mkdir -p "$work/run"
  cp "$root/examples/gossip/site.toml" "$work/"
  local slow=${SLOW_MBIT:-10}
  ((slow > 0)) && shape s4 "$slow"
  local t0=$SECONDS steps=${GOSSIP_STEPS:-60}
  for i in 1 2 3 4; do
    local seeds=(--set gossip.seeds=site-1@tcp://10.79.0.11:7101)
    ((i == 1)) && seeds=()
    start "peer-$i" "s$i" "$bin/fedmesh-node" --config site.toml --set "node.id=site-$i" \
      --set "node.key=keys/site-$i.key" --set "node.db=run/site-$i.db" \
      --set "node.metrics=run/site-$i-metrics.jsonl" --set "gossip.listen=tcp://10.79.0.1$i:7101" \
      "${seeds[@]}" --set "data.index=$((i - 1))" --set data.num_partitions=4 \
      --set "gossip.max_steps=$steps" --set gossip.eval_every=20 --set train.threads=1
  done
  for p in "${pids[@]}"; do wait "$p" || echo "a peer exited non-zero (log: run/)"; done
  pids=()
  echo "gossip: 4 peers, peer 4 behind $( ((slow > 0)) && echo "a ${slow} Mbit/s link" || echo "an unshaped link"), ${steps} steps each, $((SECONDS - t0)) s"
  for i in 1 2 3 4; do
    tail -1 "$work/run/site-$i-metrics.jsonl" | sed "s/^/  site-$i: /" | cut -c1-220
  done
}

tx_bytes() { ip netns exec "fmfed-$1" cat "/sys/class/net/v-$1/statistics/tx_bytes"; }

run_resume() {
  local up=${UPLOAD_MBIT:-1} cut_after=${CUT_AFTER_S:-4} cut=${CUT_S:-12}
  for mode in resumed restarted; do
    make_net agg s1 s2
    rm -rf "$work/keys"
    keys site-1 site-2
    ip netns exec fmfed-s2 tc qdisc replace dev v-s2 root tbf rate "${up}mbit" burst 32kb latency 400ms
    rm -rf "$work/run" && mkdir -p "$work/run"
    cp "$root"/examples/fashion-mnist/*.toml "$work/"
    local idle=600
    [[ $mode == restarted ]] && idle=1
    local t0=$SECONDS
    start aggregator agg "$bin/fedmesh-aggregator" --config aggregator.toml \
      --set aggregator.listen=tcp://10.79.0.1:5555 --set rounds.total=1 --set rounds.min_clients=2 \
      --set rounds.clients_per_round=2 --set rounds.timeout_s=300 --set aggregator.heartbeat_ms=1000 \
      --set "aggregator.upload_idle_timeout_s=$idle"
    agg_pid=${pids[-1]}
    for i in 1 2; do
      start "site-$i" "s$i" "$bin/fedmesh-node" --config "node$i.toml" \
        --set aggregator.endpoint=tcp://10.79.0.1:5555 --set train.threads=1 \
        --set aggregator.upload_chunk_kb=64
    done
    local deadline=$((SECONDS + 300))
    until grep -q "round 1: trained" "$work/run/site-2.log" 2>/dev/null; do
      ((SECONDS < deadline)) || { echo "site-2 never trained"; tail -5 "$work/run/site-2.log"; exit 1; }
      sleep 0.2
    done
    local before
    before=$(tx_bytes s2)
    sleep "$cut_after"
    ip -n fmfed-s2 link set v-s2 down
    sleep "$cut"
    ip -n fmfed-s2 link set v-s2 up
    ip -n fmfed-s2 addr add 10.79.0.12/24 dev v-s2 2>/dev/null || true
    finish_federation "$t0"
    local after sent
    after=$(tx_bytes s2)
    sent=$((after - before))
    echo "resume ($mode): site-2 put $sent bytes on its link from the end of training to the end of round 1; round 1 in ${wall} s"
    summary
    grep -h "resum\|registering again\|task came again" "$work/run/site-2.log" | sed 's/^/  site-2: /' | cut -c1-200 | head -5
    grep -c "accepted update from site-2" "$work/run/aggregator.log" | xargs echo "  site-2 updates accepted:"
    for p in "${pids[@]:-}"; do [[ -n $p ]] && kill -9 "$p" 2>/dev/null || true; done
    pids=()
  done
}

case $what in
  links) run_links ;;
  partition) run_partition ;;
  gossip) run_gossip ;;
  resume) run_resume ;;
  all) run_links; run_partition; run_gossip; run_resume ;;
  *) echo "usage: $0 [links|partition|gossip|resume|all]" >&2; exit 2 ;;
esac
