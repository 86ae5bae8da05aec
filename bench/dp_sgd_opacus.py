#!/usr/bin/python3
"""DP-SGD step time with Opacus on PyTorch (CPU), against the non-private PyTorch step, for
fedmesh's mlp (784-256-10) or cnn (--model cnn: the built-in two 5x5 convolutions, 32 and
64 channels, each with ReLU and 2x2 max pooling, Dense 512, Dense 10) on real
Fashion-MNIST at a fixed batch: the baseline of
bench/dp_sgd_step.sh. Opacus computes per-sample gradients with its hooks
(GradSampleModule) and clips, noises and averages them in its DPOptimizer; the batches are
tensors built before timing. Prints one JSON line per repeat and variant.

    /tmp/opacus-venv/bin/python bench/dp_sgd_opacus.py --batch 256 --threads 2
(a venv with --system-site-packages over Debian's python3-torch, plus `pip install
opacus==1.4.0 --no-deps opt-einsum`: bench only, never a fedmesh dependency).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--accuracy-epochs", type=int, default=0,
                   help="instead of timing: train EPOCHS with Opacus's PrivacyEngine (Poisson "
                        "sampling, noise multiplier 1, clip 1, lr 1.0, no momentum: fedmesh's "
                        "settings) and print test accuracy and Opacus's epsilon at delta 1e-5")
    a = p.parse_args()
    from torch_common import load_split, preload_blas
    preload_blas(a.threads)
    import torch
    import torch.nn as nn
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    import opacus

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    x, y = load_split("/usr/share/datasets/fashion-mnist", "train")
    x = x.reshape(-1, 784) if a.model == "mlp" else x.reshape(-1, 1, 28, 28)
    n = x.shape[0]
    batches = [(x[(i * a.batch) % (n - a.batch):][:a.batch].contiguous(),
                y[(i * a.batch) % (n - a.batch):][:a.batch].contiguous())
               for i in range(a.warmup + a.steps)]
    loss_fn = nn.CrossEntropyLoss()
    if a.accuracy_epochs > 0:
        return accuracy(a, x, y, loss_fn)

    def make():
        torch.manual_seed(0)
        if a.model == "mlp":
            return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))

    def run(private):
        model = make()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        if private:
            model = GradSampleModule(model)
            opt = DPOptimizer(opt, noise_multiplier=1.0, max_grad_norm=1.0,
                              expected_batch_size=a.batch)

        def step(i):
            bx, by = batches[i]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(bx), by).backward()
            opt.step()

        for i in range(a.warmup):
            step(i)
        t0 = time.perf_counter()
        for i in range(a.warmup, a.warmup + a.steps):
            step(i)
        return (time.perf_counter() - t0) / a.steps

    for r in range(a.repeats):
        for variant in ("non-private", "dp-sgd"):
            s = run(variant == "dp-sgd")
            print(json.dumps({"impl": "pytorch" if variant == "non-private" else "opacus",
                              "variant": variant, "model": a.model, "batch": a.batch,
                              "threads": a.threads, "repeat": r, "step_ms": s * 1e3,
                              "torch": torch.__version__, "opacus": opacus.__version__}))


def accuracy(a, x, y, loss_fn):
    import torch
    import torch.nn as nn
    from opacus import PrivacyEngine
    from torch_common import load_split
    tx, ty = load_split("/usr/share/datasets/fashion-mnist", "t10k")
    tx = tx.reshape(-1, 784)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=a.batch)
    engine = PrivacyEngine(accountant="rdp")
    model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader,
                                             noise_multiplier=1.0, max_grad_norm=1.0,
                                             poisson_sampling=True)
    t0 = time.perf_counter()
    for epoch in range(a.accuracy_epochs):
        for bx, by in loader:
            opt.zero_grad(set_to_none=True)
            loss_fn(model(bx), by).backward()
            opt.step()
    with torch.no_grad():
        acc = (model(tx).argmax(1) == ty).float().mean().item()
    print(json.dumps({"impl": "opacus", "epochs": a.accuracy_epochs, "batch": a.batch,
                      "test_accuracy": acc, "epsilon": engine.get_epsilon(1e-5),
                      "seconds": time.perf_counter() - t0}))


if __name__ == "__main__":
    main()
