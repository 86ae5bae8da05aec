#!/usr/bin/env bash
# The fedmesh-sim experiments of issues 5, 6 and 8 (see bench/RESULTS.md): each runs
# build/bin/fedmesh-sim and prints one markdown table row: final and best test accuracy,
# bytes sent (clients up, and all bytes), simulated and wall time.
# Usage: bench/sim_experiments.sh [table...]   tables: gossip16 choco strategies
#        compression dropout baselines byzantine serveropt dp (default: all but the last three).
#        Env: THREADS=2, ROUNDS=50, OUT=dir, SIM=path of the fedmesh-sim binary.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sim="${SIM:-$root/build/bin/fedmesh-sim}"  # SIM=copy: keep rebuilding while it runs
[[ -x $sim ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
out="${OUT:-$root/runs/sim-experiments-$(date -u +%Y%m%d-%H%M%S)}"
threads="${THREADS:-2}"
rounds="${ROUNDS:-50}"
mkdir -p "$out"
export OMP_WAIT_POLICY=passive

# run <name> <fedmesh-sim args...>: one table row.
run() {
  local name=$1
  shift
  local metrics="$out/$name.jsonl"
  "$sim" --quiet --set sim.threads="$threads" --set sim.metrics="$metrics" "$@" \
      >"$out/$name.log" 2>&1 || { echo "| $name | FAILED, see $out/$name.log |"; return 0; }
  /usr/bin/python3 - "$metrics" "$name" "$out/$name.log" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
acc = [r["test_accuracy"] for r in rows if "test_accuracy" in r]
up = sum(r["bytes_up"] for r in rows)
down = sum(r["bytes_down"] for r in rows)
wall = re.search(r"in ([0-9.]+) s wall", open(sys.argv[3]).read())
cons = rows[-1].get("consensus_distance")
print(f"| {sys.argv[2]} | {acc[-1]:.4f} | {max(acc):.4f} | {up/1e6:.2f} | {(up+down)/1e6:.2f} | "
      f"{rows[-1]['sim_time_s']:.0f} | {wall.group(1) if wall else '?'} |"
      + (f" {cons:.2e} |" if cons is not None else " |"))
PY
}

header() {
  echo
  echo "### $1"
  echo
  echo "| run | final acc | best acc | client upload MB | all bytes MB | sim time s | wall s | consensus |"
  echo "|---|---|---|---|---|---|---|---|"
}

tables=("$@")
[[ ${#tables[@]} -gt 0 ]] || tables=(gossip16 choco strategies compression dropout baselines)
common=(--set sim.rounds="$rounds" --set eval.every=5)
for t in "${tables[@]}"; do
  case $t in
    gossip16)  # issue 5: 16 nodes, same partitions, same local steps (1 epoch per round)
      header "16 nodes, Dirichlet(0.5), 1 local epoch per round, $rounds rounds: gossip vs FedAvg"
      g=(--set sim.clients=16 --set sim.clients_per_round=16 --set train.epochs=1 --set train.lr=0.1 --set eval.clients=16)
      run fedavg-16 "${common[@]}" "${g[@]}" --set sim.mode=aggregator
      run fedavg-16-topk0.01int8 "${common[@]}" "${g[@]}" --set sim.mode=aggregator --set 'sim.codec=topk:0.01|int8'
      run pushpull-16 "${common[@]}" "${g[@]}" --set sim.mode=gossip --set sim.protocol=pushpull --set sim.topology=random
      run dpsgd-16 "${common[@]}" "${g[@]}" --set sim.mode=gossip --set sim.protocol=dpsgd
      run dpsgd-16-fp16 "${common[@]}" "${g[@]}" --set sim.mode=gossip --set sim.protocol=dpsgd --set sim.codec=fp16
      run choco-16-topk0.01int8 "${common[@]}" "${g[@]}" --set sim.mode=gossip --set sim.protocol=choco --set 'sim.codec=topk:0.01|int8'
      run choco-16-topk0.1int8 "${common[@]}" "${g[@]}" --set sim.mode=gossip --set sim.protocol=choco --set 'sim.codec=topk:0.1|int8'
      ;;
    choco)  # CHOCO's consensus step size against the top-k ratio, 16 nodes as in gossip16
      header "16 nodes, Dirichlet(0.5), CHOCO consensus step size sweep"
      g=(--set sim.clients=16 --set sim.clients_per_round=16 --set train.epochs=1 --set train.lr=0.1 --set eval.clients=16)
      for gamma in 0.1 0.05 0.02; do
        run "choco-16-topk0.01int8-gamma$gamma" "${common[@]}" "${g[@]}" --set sim.mode=gossip --set sim.protocol=choco \
            --set 'sim.codec=topk:0.01|int8' --set gossip.choco_gamma=$gamma
      done
      run "choco-16-topk0.1int8-gamma0.1" "${common[@]}" "${g[@]}" --set sim.mode=gossip --set sim.protocol=choco \
          --set 'sim.codec=topk:0.1|int8' --set gossip.choco_gamma=0.1
      ;;
    strategies)  # issue 6: FedAvg vs FedProx vs gossip, 100 clients, three skews
      for a in 0.1 0.5 100; do
        header "100 clients, Dirichlet($a), $rounds rounds: FedAvg / FedProx (10 per round, 5 epochs) vs gossip (all, 1 epoch)"
        run "fedavg-a$a" --config "$root/examples/sim/fedavg.toml" "${common[@]}" --set sim.alpha=$a
        run "fedprox-a$a" --config "$root/examples/sim/fedprox.toml" "${common[@]}" --set sim.alpha=$a
        run "gossip-dpsgd-a$a" --config "$root/examples/sim/gossip.toml" "${common[@]}" --set sim.alpha=$a
      done
      ;;
    compression)
      header "100 clients, Dirichlet(0.5), FedAvg, update codec sweep (error feedback auto)"
      for c in none fp16 int8 topk:0.1 'topk:0.01|int8'; do
        run "fedavg-codec-$c" --config "$root/examples/sim/fedavg.toml" "${common[@]}" --set "sim.codec=$c"
      done
      # Update prediction (docs/codecs.md): the top-k uplink sends only what the last
      # round's global change does not already predict.
      run "fedavg-codec-topk:0.01|int8-predict0.9" --config "$root/examples/sim/fedavg.toml" \
          "${common[@]}" --set 'sim.codec=topk:0.01|int8' --set rounds.update_prediction=0.9
      ;;
    dropout)
      header "100 clients, Dirichlet(0.5), FedAvg, dropout sweep (min_clients 1, timeout 120 s)"
      for d in 0 0.1 0.3 0.5; do
        run "fedavg-dropout-$d" --config "$root/examples/sim/fedavg.toml" "${common[@]}" --set sim.dropout=$d \
            --set rounds.min_clients=1 --set rounds.timeout_s=120
      done
      ;;
    baselines)
      header "100 clients, Dirichlet(0.5): local-only and centralised baselines"
      run local-a0.5 --config "$root/examples/sim/baselines.toml" "${common[@]}" --set sim.mode=local
      run central --config "$root/examples/sim/baselines.toml" "${common[@]}" --set sim.mode=central
      ;;
    byzantine)
      header "100 clients, Dirichlet(0.5), FedAvg, 20% Byzantine (sign flip x10)"
      run fedavg-clean --config "$root/examples/sim/fedavg.toml" "${common[@]}"
      run fedavg-byz0.2 --config "$root/examples/sim/fedavg.toml" "${common[@]}" --set faults.byzantine=0.2
      for s in median trimmed_mean krum multikrum; do
        run "$s-byz0.2" --config "$root/examples/sim/fedavg.toml" "${common[@]}" --set faults.byzantine=0.2 \
            --set sim.strategy=$s --set strategy.trim_fraction=0.2 --set strategy.byzantine_fraction=0.2
      done
      run median-clean --config "$root/examples/sim/fedavg.toml" "${common[@]}" --set sim.strategy=median
      ;;
    serveropt)  # issue 8: server optimisers against FedAvg, same clients and local work
      header "100 clients, Dirichlet(0.5), server optimisers (10 per round, 5 epochs)"
      run fedavg --config "$root/examples/sim/fedavg.toml" "${common[@]}"
      run fedavgm-lr1-m0.9 --config "$root/examples/sim/fedavg.toml" "${common[@]}" --set sim.strategy=fedavgm --set strategy.server_lr=1
      run fedavgm-default-lr0.1-m0.9 --config "$root/examples/sim/fedavg.toml" "${common[@]}" --set sim.strategy=fedavgm
      run fedavgm-lr0.3-m0.9 --config "$root/examples/sim/fedavg.toml" "${common[@]}" --set sim.strategy=fedavgm --set strategy.server_lr=0.3
      for s in fedadam fedyogi fedadagrad; do
        for lr in 0.01 0.03; do
          run "$s-lr$lr" --config "$root/examples/sim/fedavg.toml" "${common[@]}" --set sim.strategy=$s --set strategy.server_lr=$lr
        done
      done
      ;;
    dp)  # issue 8: central DP-FedAvg, 1000 clients, 100 per round (q = 0.1), delta 1e-5
      header "1000 clients, Dirichlet(0.5), 100 per round, 1 epoch: central DP (clip 1, epsilon at delta 1e-5 in the jsonl)"
      d=(--config "$root/examples/sim/fedavg.toml" "${common[@]}" --set sim.clients=1000 --set sim.clients_per_round=100
         --set train.epochs=1)
      run dp-off "${d[@]}"
      for z in 0.5 1.0; do
        run "dp-z$z-clip1" "${d[@]}" --set dp.mode=central --set dp.noise_multiplier=$z --set dp.clip=1
      done
      run dp-z1.0-adaptive "${d[@]}" --set dp.mode=central --set dp.noise_multiplier=1.0 --set dp.clip=1 \
          --set dp.adaptive_clip=true
      ;;
    *) echo "unknown table $t" >&2; exit 2 ;;
  esac
done
echo
echo "metrics and logs: $out"
