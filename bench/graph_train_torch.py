#!/usr/bin/python3
"""PyTorch side of bench/graph_train_throughput.sh: one training epoch of an example model
from examples/pytorch/models.py (the same nn.Module fedmesh imports as ONNX) on real
Fashion-MNIST, timed the way fedmesh times an epoch (Trainer::TrainEpoch): the shuffle is
done before the clock starts; gathering each batch, forward, loss, backward, the SGD step
and the running loss/accuracy sums are inside it; the last partial batch is kept.

    /usr/bin/python3 bench/graph_train_torch.py --model resnet --batch 32 --threads 2 --samples 12000 --json

--samples N trains on N samples drawn (seeded) from the 60k training set, like fedmesh's
--num-partitions 60000/N; the data in memory is [N,1,28,28] float in [0,1].
"""

import argparse
import json
import os
import sys
import time

from torch_common import blas_variant, load_split, preload_blas

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {"mlp": "fmnist_mlp", "resnet": "fmnist_resnet"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="PyTorch epoch throughput of the examples/pytorch models")
    p.add_argument("--model", choices=sorted(MODELS), required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--threads", type=int, required=True,
                   help="torch.set_num_threads(N); interop threads are fixed to 1")
    p.add_argument("--samples", type=int, default=60000,
                   help="training samples in the epoch (default 60000, all)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0, help="model init, subset and shuffle seed")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--blas", choices=["openmp", "system"], default="openmp",
                   help="see bench/torch_common.py: 'openmp' (default) preloads the OpenBLAS build "
                        "fedmesh links")
    p.add_argument("--json", action="store_true", help="print exactly one JSON line to stdout")
    p.add_argument("--device", default="cpu",
                   help="cpu or cuda: on cuda the data sits on the GPU and TF32 is off (FP32, as fedmesh)")
    a = p.parse_args(argv)
    for name in ("batch", "threads", "samples"):
        if getattr(a, name) < 1:
            p.error("--%s must be >= 1" % name)
    if a.samples > 60000:
        p.error("--samples must be <= 60000 (the training set)")
    return a


ARGS = parse_args()
preload_blas(ARGS.threads, ARGS.blas)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
import models  # noqa: E402


def main():
    a = ARGS
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    x, y = load_split(a.data_dir, "train")
    gen = torch.Generator().manual_seed(a.seed)
    keep = torch.randperm(x.shape[0], generator=gen)[:a.samples]
    x = x[keep].reshape(-1, 1, 28, 28).contiguous()
    y = y[keep].contiguous()
    if a.device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        x, y = x.to(a.device), y.to(a.device)

    model = models.build(MODELS[a.model], a.seed).to(a.device)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=0)
    loss_fn = nn.CrossEntropyLoss()
    order = torch.randperm(a.samples, generator=gen).to(a.device)

    loss_sum, correct = 0.0, 0
    t0 = time.perf_counter()
    for first in range(0, a.samples, a.batch):
        idx = order[first:first + a.batch]
        xb, yb = x[idx], y[idx]
        opt.zero_grad(set_to_none=True)
        logits = model(xb)
        loss = loss_fn(logits, yb)
        loss.backward()
        opt.step()
        loss_sum += float(loss) * idx.numel()
        correct += int((logits.detach().argmax(1) == yb).sum())
    if a.device != "cpu":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    sps = a.samples / elapsed
    out = {
        "impl": "pytorch", "torch_version": torch.__version__, "model": a.model,
        "batch": a.batch, "threads": a.threads, "device": a.device, "train_samples": a.samples,
        "seconds": round(elapsed, 6), "epoch_samples_per_s": round(sps, 2),
        "train_loss": round(loss_sum / a.samples, 6), "train_accuracy": round(correct / a.samples, 6),
        "blas": blas_variant(),
    }
    if a.json:
        print(json.dumps(out))
    else:
        print("pytorch %s  model=%s batch=%d threads=%d  %d samples in %.3f s -> %.1f samples/s  "
              "train loss %.4f acc %.4f  [blas: %s]"
              % (torch.__version__, a.model, a.batch, a.threads, a.samples, elapsed, sps,
                 out["train_loss"], out["train_accuracy"], out["blas"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
