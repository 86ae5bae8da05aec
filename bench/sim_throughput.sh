#!/bin/bash
# Issue 6 benchmark: simulated client updates per second, fedmesh-sim against (a) the same
# workload as a plain PyTorch loop and (b) Flower's own simulation, side by side in one run.
# Workload: 1,000 clients on 100 IID shards of 600 Fashion-MNIST images (client c trains on
# shard c mod 100), 100 clients per round, mlp, 1 local epoch of plain SGD (batch 32, lr 0.1),
# FedAvg. Same thread count for all three (THREADS, default 2). Compare fedmesh-sim's
# "the rounds alone" figure with the baselines': like them it leaves out loading the data
# (its whole-run figure, printed beside it, does not).
#
#   bench/sim_throughput.sh                       # fedmesh-sim and the PyTorch loop
#   FLOWER_PYTHON=/tmp/flvenv/bin/python bench/sim_throughput.sh   # and Flower
#
# Flower is a baseline only: make a venv over Debian's python3 (for python3-torch) and
# install it there:
#   /usr/bin/python3 -m venv --system-site-packages /tmp/flvenv
#   /tmp/flvenv/bin/pip install "flwr[simulation]" && /tmp/flvenv/bin/pip uninstall -y numpy
# (the second step keeps Debian's numpy 1.x, which Debian's torch was built against).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
threads=${THREADS:-2}
sim_rounds=${SIM_ROUNDS:-20}
torch_rounds=${TORCH_ROUNDS:-10}
flower_rounds=${FLOWER_ROUNDS:-3}
sim=${SIM:-$root/build/bin/fedmesh-sim}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

echo "== fedmesh-sim ($sim_rounds rounds, $threads threads)"
"$sim" --set sim.mode=aggregator --set sim.clients=1000 --set sim.clients_per_round=100 \
    --set sim.rounds="$sim_rounds" --set sim.model=mlp --set sim.partition=iid --set data.shards=100 \
    --set train.epochs=1 --set train.batch=32 --set train.lr=0.1 --set sim.threads="$threads" \
    --set eval.every="$sim_rounds" 2>&1 | tail -2
echo "== PyTorch loop ($torch_rounds rounds, $threads threads)"
/usr/bin/python3 "$root/bench/fl_baselines.py" --impl torch-loop --rounds "$torch_rounds" --threads "$threads"
if [[ -n "${FLOWER_PYTHON:-}" ]]; then
  echo "== Flower simulation ($flower_rounds rounds, $threads Ray CPUs)"
  "$FLOWER_PYTHON" "$root/bench/fl_baselines.py" --impl flower --rounds "$flower_rounds" \
      --threads "$threads" 2>/dev/null | tail -1
fi
