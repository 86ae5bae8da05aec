#!/usr/bin/python3
"""A site's own PyTorch training script, driven by fedmesh-node ([train] external).

The node starts it (or the site runs it and names the node's socket with --endpoint),
sends it every task with the federation's current model as named tensors, and gets the
trained weights back; the node does everything else (CurveZMQ, signatures, secure
aggregation, the store). This script only trains and evaluates, on this site's share of
Fashion-MNIST from Debian's dataset-fashion-mnist package (no downloads):

    [train]
    external = ["/usr/bin/python3", "train.py", "--model", "fmnist_cnn", "--sites", "4", "--index", "0"]

The site's share: the training images whose position is index (mod sites), after a
seeded shuffle (IID), or a Dirichlet(alpha) label skew with --partition dirichlet; the
test images index (mod sites) for evaluation tasks. Needs python3-torch and the fedmesh
package (pip install ./python, or PYTHONPATH=python).
"""

import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # models.py
if os.path.isdir(os.path.join(HERE, "..", "..", "python", "fedmesh")):
    sys.path.append(os.path.join(HERE, "..", "..", "python"))  # a checkout without pip install
import fedmesh  # noqa: E402
import fedmesh.torch  # noqa: E402
from models import build  # noqa: E402

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(DATA_DIR, prefix + "-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(DATA_DIR, prefix + "-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    return x, torch.from_numpy(y.astype(np.int64))


def share(y, sites, index, partition, alpha, seed):
    rng = np.random.default_rng(seed)
    n = len(y)
    if partition == "iid":
        order = rng.permutation(n)
        return np.sort(order[index::sites])
    # Dirichlet label skew: each class's rows split among the sites by Dir(alpha) weights.
    labels = y.numpy()
    mine = []
    for c in range(int(labels.max()) + 1):
        rows = rng.permutation(np.flatnonzero(labels == c))
        cuts = (np.cumsum(rng.dirichlet([alpha] * sites)) * len(rows)).astype(int)[:-1]
        mine.append(np.split(rows, cuts)[index])
    return np.sort(np.concatenate(mine))


def fit(model, x, y, task):
    g = torch.Generator().manual_seed(task.seed & 0x7FFFFFFFFFFFFFFF)
    opt = torch.optim.SGD(model.parameters(), lr=task.lr, momentum=task.momentum)
    model.train()
    total, count, steps = 0.0, 0, 0
    epochs = task.epochs if task.steps == 0 else 1 << 30
    for _ in range(epochs):
        for batch in torch.randperm(len(y), generator=g).split(task.batch):
            opt.zero_grad()
            loss = F.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            opt.step()
            total += loss.item() * len(batch)
            count += len(batch)
            steps += 1
            if task.steps and steps >= task.steps:
                return total / count
    return total / count


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    loss, correct = 0.0, 0
    for i in range(0, len(y), 1000):
        out = model(x[i:i + 1000])
        loss += F.cross_entropy(out, y[i:i + 1000], reduction="sum").item()
        correct += (out.argmax(1) == y[i:i + 1000]).sum().item()
    return loss / len(y), correct / len(y)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="fmnist_cnn", help="a model of models.py (default fmnist_cnn)")
    p.add_argument("--sites", type=int, default=1, help="how many sites share the data")
    p.add_argument("--index", type=int, default=0, help="this site's share, in [0, sites)")
    p.add_argument("--partition", default="iid", choices=["iid", "dirichlet"])
    p.add_argument("--alpha", type=float, default=0.5, help="dirichlet concentration")
    p.add_argument("--seed", type=int, default=7, help="seed of the split (the same at every site)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--endpoint", default=None, help="the node's ipc:// socket (default: from the node)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    x, y = load("train")
    rows = share(y, a.sites, a.index, a.partition, a.alpha, a.seed)
    x, y = x[rows], y[rows]
    tx, ty = load("test")
    tx, ty = tx[a.index::a.sites], ty[a.index::a.sites]
    model = build(a.model)
    node_id = os.environ.get("FEDMESH_NODE_ID", "?")
    print(f"[{node_id} trainer] {len(y)} training and {len(ty)} test images, model {a.model}", flush=True)
    with fedmesh.connect(a.endpoint, num_examples=len(y), name="pytorch " + a.model) as site:
        for task in site.tasks():
            fedmesh.torch.load(model, task.weights)
            if task.kind == "fit":
                t0 = time.perf_counter()
                loss = fit(model, x, y, task)
                task.reply(weights=fedmesh.torch.from_module(model), num_examples=len(y),
                           metrics={"loss": loss, "train_seconds": time.perf_counter() - t0})
            else:
                loss, acc = evaluate(model, tx, ty)
                task.reply(num_examples=len(ty), metrics={"loss": loss, "accuracy": acc})
    return 0


if __name__ == "__main__":
    sys.exit(main())
