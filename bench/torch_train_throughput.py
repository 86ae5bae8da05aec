#!/usr/bin/python3
"""PyTorch CPU training-throughput baseline for fedmesh.

Trains one of fedmesh's reference architectures (logreg / mlp / cnn) on real
Fashion-MNIST with plain SGD+momentum and reports training throughput
(samples/s).  Batches are pre-built as tensors before timing, so the timed
region measures training only (the C++ side also has its data in memory).

Run with Debian's interpreter (it has python3-torch):

    /usr/bin/python3 bench/torch_train_throughput.py --model mlp --batch 32 --threads 2 --json

Accuracy check (trains EPOCHS shuffled epochs, prints t10k test accuracy):

    /usr/bin/python3 bench/torch_train_throughput.py --model mlp --batch 32 --threads 2 --check-accuracy 1
"""

import argparse
import json
import sys
import time


from torch_common import (OPENBLAS_OPENMP_DIR, blas_variant, build_model, load_split,
                          preload_blas)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="PyTorch CPU training-throughput baseline (fedmesh models)")
    p.add_argument("--model", choices=["logreg", "mlp", "cnn"], required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--threads", type=int, required=True,
                   help="torch.set_num_threads(N); interop threads are fixed to 1")
    p.add_argument("--steps", type=int, default=300, help="timed training steps")
    p.add_argument("--warmup", type=int, default=30, help="untimed warm-up steps")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print exactly one JSON line to stdout")
    p.add_argument("--device", default="cpu",
                   help="torch device: cpu (default) or cuda[:N]; on cuda the batches live on the GPU "
                        "before timing, TF32 is off (fedmesh's GEMMs are full FP32) and the clock "
                        "stops after torch.cuda.synchronize()")
    p.add_argument("--blas", choices=["openmp", "system"], default="openmp",
                   help="which OpenBLAS build torch's GEMMs use: 'openmp' (default) preloads Debian's "
                        "OpenMP build from " + OPENBLAS_OPENMP_DIR + " (the one fedmesh links) so GEMMs share "
                        "torch's OpenMP pool; 'system' keeps the libblas.so.3 alternative (pthread build)")
    p.add_argument("--check-accuracy", type=int, metavar="EPOCHS", default=None,
                   help="train EPOCHS full shuffled epochs and print t10k test accuracy instead of timing")
    a = p.parse_args(argv)
    for name in ("batch", "threads", "steps"):
        if getattr(a, name) < 1:
            p.error("--%s must be >= 1" % name)
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    if a.check_accuracy is not None and a.check_accuracy < 1:
        p.error("--check-accuracy must be >= 1")
    return a


ARGS = parse_args()
preload_blas(ARGS.threads, ARGS.blas)


import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


# ---------------------------------------------------------------- data

def shape_input(x, model):
    """[N,28,28] -> [N,1,28,28] (cnn) or [N,784] (logreg/mlp); contiguous."""
    if model == "cnn":
        return x.reshape(-1, 1, 28, 28).contiguous()
    return x.reshape(-1, 784).contiguous()


def prebuild_batches(x, y, batch, count, model):
    """`count` batches taken in order, cycling through the data (wrapping around)."""
    n = x.shape[0]
    out = []
    pos = 0
    for _ in range(count):
        idx = (torch.arange(pos, pos + batch) % n)
        out.append((shape_input(x[idx], model), y[idx].contiguous()))
        pos = (pos + batch) % n
    return out


# ---------------------------------------------------------------- models

def make_step(model, opt, loss_fn):
    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss
    return step


# ---------------------------------------------------------------- modes

def sync(a):
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()


def run_throughput(a, model, step):
    x, y = load_split(a.data_dir, "train")
    total = a.warmup + a.steps
    batches = [(xb.to(a.device), yb.to(a.device))
               for xb, yb in prebuild_batches(x, y, a.batch, total, a.model)]
    del x, y
    model.train()
    loss = None
    for i in range(a.warmup):
        loss = step(*batches[i])
    sync(a)
    t0 = time.perf_counter()
    for i in range(a.warmup, total):
        loss = step(*batches[i])
    sync(a)
    elapsed = time.perf_counter() - t0
    final_loss = float(loss.item())  # after timing (the last step is already complete on CPU)
    sps = a.steps * a.batch / elapsed
    if a.json:
        print(json.dumps({
            "impl": "pytorch", "torch_version": torch.__version__, "model": a.model,
            "device": a.device, "batch": a.batch, "threads": a.threads, "steps": a.steps,
            "seconds": round(elapsed, 6), "samples_per_s": round(sps, 2), "loss": round(final_loss, 6),
            "blas": blas_variant(),
        }))
    else:
        print("pytorch %s  model=%s batch=%d threads=%d  %d steps in %.3f s  -> %.1f samples/s  "
              "(%.3f ms/step)  final loss %.4f  [blas: %s]"
              % (torch.__version__, a.model, a.batch, a.threads, a.steps, elapsed, sps,
                 1e3 * elapsed / a.steps, final_loss, blas_variant()))


@torch.no_grad()
def evaluate(model, x, y, model_name, chunk=1000):
    model.eval()
    correct = 0
    for s in range(0, x.shape[0], chunk):
        logits = model(shape_input(x[s:s + chunk], model_name))
        correct += int((logits.argmax(1) == y[s:s + chunk]).sum())
    model.train()
    return correct / x.shape[0]


def run_accuracy(a, model, step):
    xtr, ytr = load_split(a.data_dir, "train")
    xte, yte = load_split(a.data_dir, "t10k")
    xtr = shape_input(xtr, a.model)
    gen = torch.Generator().manual_seed(a.seed)
    n = xtr.shape[0]
    t0 = time.perf_counter()
    results = []
    for ep in range(1, a.check_accuracy + 1):
        perm = torch.randperm(n, generator=gen)
        tot, cnt = 0.0, 0
        # the final partial batch (60000 % batch samples) is kept
        for s in range(0, n, a.batch):
            idx = perm[s:s + a.batch]
            loss = step(xtr[idx], ytr[idx])
            tot += float(loss) * idx.numel()
            cnt += idx.numel()
        acc = evaluate(model, xte, yte, a.model)
        results.append({"epoch": ep, "train_loss": tot / cnt, "test_accuracy": acc})
        if not a.json:
            print("epoch %d  mean train loss %.4f  test accuracy %.4f  (%.1f s elapsed)"
                  % (ep, tot / cnt, acc, time.perf_counter() - t0))
    elapsed = time.perf_counter() - t0
    if a.json:
        print(json.dumps({
            "impl": "pytorch", "torch_version": torch.__version__, "model": a.model,
            "batch": a.batch, "threads": a.threads, "epochs": a.check_accuracy, "seed": a.seed,
            "lr": a.lr, "momentum": a.momentum, "seconds": round(elapsed, 3),
            "train_loss": round(results[-1]["train_loss"], 6),
            "test_accuracy": results[-1]["test_accuracy"], "per_epoch": results, "blas": blas_variant(),
        }))


def main():
    a = ARGS
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    if a.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = build_model(a.model).to(a.device)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=0)
    step = make_step(model, opt, nn.CrossEntropyLoss())
    if a.check_accuracy is not None:
        run_accuracy(a, model, step)
    else:
        run_throughput(a, model, step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
