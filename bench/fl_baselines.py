#!/usr/bin/python3
"""Simulated federated-learning throughput baselines for fedmesh-sim (issue 6 benchmark).

The workload of bench/sim_throughput.sh: 1,000 clients over 100 IID shards of 600
Fashion-MNIST training images (client c trains on shard c % 100), 100 clients per round,
the mlp (784-256-10), 1 local epoch of plain SGD (batch 32, lr 0.1), FedAvg weighted by
examples.  Two implementations:

  torch-loop  the plain PyTorch loop: copy the global model, train each sampled client in
              turn, accumulate the weighted average (one process, --threads intra-op threads)
  flower      Flower's own simulation (flwr.simulation.start_simulation on Ray), PyTorch
              NumPyClients, --threads Ray CPUs with one CPU per client

Prints one JSON line: client updates per second over all rounds, and for flower also over
rounds 2.. (Ray's start-up and the actors' first data load excluded).

    /usr/bin/python3 bench/fl_baselines.py --impl torch-loop --rounds 5 --threads 2
    VENV/bin/python bench/fl_baselines.py --impl flower --rounds 4 --threads 2

flower needs `pip install "flwr[simulation]"` (a venv made with --system-site-packages
over Debian's python3, so that torch is Debian's python3-torch); it is a benchmark
baseline only, never a dependency of fedmesh.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import blas_variant, build_model, load_split, preload_blas  # noqa: E402

CLIENTS, SHARDS, PER_ROUND, BATCH, LR = 1000, 100, 100, 32, 0.1


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", choices=["torch-loop", "flower"], required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    if a.rounds < 1 or a.threads < 1:
        p.error("--rounds and --threads must be >= 1")
    return a


ARGS = parse_args()
# torch-loop: one process with --threads intra-op threads; flower: one thread per client.
preload_blas(ARGS.threads if ARGS.impl == "torch-loop" else 1)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

_DATA = {}


def data():
    """Training images as [N,784], labels, and the shards (loaded once per process)."""
    if not _DATA:
        x, y = load_split(ARGS.data_dir, "train")
        perm = np.random.default_rng(ARGS.seed).permutation(x.shape[0])
        shards = np.array_split(perm, SHARDS)  # 600 images each
        _DATA.update(x=x.reshape(-1, 784).contiguous(), y=y, shards=[torch.from_numpy(s) for s in shards])
    return _DATA


def train_client(model, cid, round_seed):
    """One local epoch of plain SGD on client `cid`'s shard; returns its example count."""
    d = data()
    idx = d["shards"][cid % SHARDS]
    g = torch.Generator().manual_seed(round_seed * 1_000_003 + cid)
    order = idx[torch.randperm(idx.numel(), generator=g)]
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    for b in range(0, order.numel(), BATCH):
        sel = order[b:b + BATCH]
        opt.zero_grad(set_to_none=True)
        loss_fn(model(d["x"][sel]), d["y"][sel]).backward()
        opt.step()
    return int(idx.numel())


def test_accuracy(model):
    x, y = load_split(ARGS.data_dir, "t10k")
    with torch.no_grad():
        return float((model(x.reshape(-1, 784)).argmax(1) == y).float().mean())


def sampled(round_index):
    return np.random.default_rng(ARGS.seed * 7919 + round_index).choice(CLIENTS, PER_ROUND, replace=False)


def run_torch_loop():
    torch.manual_seed(ARGS.seed)
    torch.set_num_threads(ARGS.threads)
    data()
    global_model, worker = build_model("mlp"), build_model("mlp")
    params = list(global_model.parameters())
    start = time.perf_counter()
    for r in range(ARGS.rounds):
        acc = [torch.zeros_like(p) for p in params]
        total = 0
        for cid in sampled(r):
            with torch.no_grad():
                for w, g in zip(worker.parameters(), params):
                    w.copy_(g)
            n = train_client(worker, int(cid), r)
            with torch.no_grad():
                for a, w in zip(acc, worker.parameters()):
                    a.add_(w, alpha=n)
            total += n
        with torch.no_grad():
            for p, a in zip(params, acc):
                p.copy_(a / total)
    elapsed = time.perf_counter() - start
    updates = ARGS.rounds * PER_ROUND
    return {"updates": updates, "seconds": elapsed, "updates_per_s": updates / elapsed,
            "test_accuracy": test_accuracy(global_model)}


def run_flower():
    import flwr
    from flwr.client import NumPyClient
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import start_simulation

    class Client(NumPyClient):
        def __init__(self, cid):
            self.cid = cid

        def fit(self, parameters, config):
            torch.set_num_threads(1)
            model = build_model("mlp")
            with torch.no_grad():
                for p, v in zip(model.parameters(), parameters):
                    p.copy_(torch.from_numpy(v))
            n = train_client(model, self.cid, int(config.get("round", 0)))
            return [p.detach().numpy().copy() for p in model.parameters()], n, {}

    def client_fn(context):
        return Client(int(context.node_config["partition-id"])).to_client()

    round_ends = []

    class TimedFedAvg(FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            out = super().configure_fit(server_round, parameters, client_manager)
            for _, ins in out:
                ins.config["round"] = server_round
            return out

        def aggregate_fit(self, server_round, results, failures):
            out = super().aggregate_fit(server_round, results, failures)
            round_ends.append((time.perf_counter(), len(results), len(failures)))
            self.final = out[0]
            return out

    torch.manual_seed(ARGS.seed)
    init = [p.detach().numpy().copy() for p in build_model("mlp").parameters()]
    strategy = TimedFedAvg(fraction_fit=PER_ROUND / CLIENTS, min_fit_clients=PER_ROUND,
                           min_available_clients=CLIENTS, fraction_evaluate=0.0,
                           min_evaluate_clients=0, initial_parameters=ndarrays_to_parameters(init))
    start = time.perf_counter()
    start_simulation(client_fn=client_fn, num_clients=CLIENTS,
                     config=ServerConfig(num_rounds=ARGS.rounds), strategy=strategy,
                     client_resources={"num_cpus": 1, "num_gpus": 0.0},
                     ray_init_args={"num_cpus": ARGS.threads, "include_dashboard": False,
                                    "log_to_driver": False})
    if len(round_ends) != ARGS.rounds or any(f for _, _, f in round_ends):
        raise SystemExit("flower: rounds %s (end time, results, failures)" % round_ends)
    updates = sum(n for _, n, _ in round_ends)
    first_end = round_ends[0][0]
    later = sum(n for _, n, _ in round_ends[1:])
    model = build_model("mlp")
    from flwr.common import parameters_to_ndarrays
    with torch.no_grad():
        for p, v in zip(model.parameters(), parameters_to_ndarrays(strategy.final)):
            p.copy_(torch.from_numpy(v))
    return {"updates": updates, "seconds": round_ends[-1][0] - start,
            "updates_per_s": updates / (round_ends[-1][0] - start),
            "updates_per_s_after_round_1": later / (round_ends[-1][0] - first_end) if later else None,
            "flwr_version": flwr.__version__, "test_accuracy": test_accuracy(model)}


def main():
    result = run_torch_loop() if ARGS.impl == "torch-loop" else run_flower()
    result.update(impl=ARGS.impl, rounds=ARGS.rounds, threads=ARGS.threads, clients=CLIENTS,
                  per_round=PER_ROUND, torch_version=torch.__version__, blas=blas_variant())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
