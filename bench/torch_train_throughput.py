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
import gzip
import json
import os
import struct
import sys
import time


OPENBLAS_OPENMP_DIR = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


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
# Thread pools.  torch's intra-op pool is OpenMP (libgomp); its GEMMs (nn.Linear) go to
# OpenBLAS.  Debian's default OpenBLAS alternative is the *pthread* build, which keeps a
# second pool of spinning threads that torch.set_num_threads() does not control: with both
# pools at 2 threads on a 2-core machine they fight, and throughput drops 3-50x and becomes
# erratic.  fedmesh links the OpenMP build of OpenBLAS for exactly this reason, so by default
# we preload that build (RTLD_GLOBAL, before torch is imported: the dynamic linker then
# satisfies torch's libblas.so.3 / liblapack.so.3 / libopenblas.so.0 NEEDED entries with the
# already-loaded objects of the same soname) and the GEMMs run on torch's OpenMP pool.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, str(ARGS.threads))
if ARGS.blas == "openmp":
    import ctypes
    _libs = ("libopenblas.so.0", "libblas.so.3", "liblapack.so.3")
    if all(os.path.exists(os.path.join(OPENBLAS_OPENMP_DIR, l)) for l in _libs):
        for _lib in _libs:
            ctypes.CDLL(os.path.join(OPENBLAS_OPENMP_DIR, _lib), mode=ctypes.RTLD_GLOBAL)
    else:
        print("warning: %s not found (apt install libopenblas0-openmp); using the system BLAS"
              % OPENBLAS_OPENMP_DIR, file=sys.stderr)


def loaded_blas():
    """Path(s) of the BLAS/LAPACK implementation actually mapped into this process."""
    found = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "blas" in os.path.basename(path) or "mkl" in os.path.basename(path):
                found.add(path)
    return sorted(found)


def blas_variant():
    paths = loaded_blas()
    if any("openblas-openmp" in p for p in paths) and not any("openblas-pthread" in p for p in paths):
        return "openblas-openmp"
    if any("openblas-pthread" in p for p in paths) and not any("openblas-openmp" in p for p in paths):
        return "openblas-pthread"
    return "+".join(os.path.basename(os.path.dirname(p)) + "/" + os.path.basename(p) for p in paths) or "unknown"


import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


# ---------------------------------------------------------------- data

def read_idx(path):
    """Read a (gzipped) IDX file: magic 0x00 0x00 <dtype> <ndim>, ndim big-endian u32 dims."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError("%s: bad IDX magic %r" % (path, raw[:4]))
    dtype_code, ndim = raw[2], raw[3]
    dtypes = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    if dtype_code not in dtypes:
        raise ValueError("%s: unknown IDX dtype 0x%02x" % (path, dtype_code))
    dims = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    dt = np.dtype(dtypes[dtype_code])
    count = int(np.prod(dims)) if ndim else 1
    offset = 4 + 4 * ndim
    if len(raw) - offset != count * dt.itemsize:
        raise ValueError("%s: size mismatch: header says %s, payload %d bytes"
                         % (path, dims, len(raw) - offset))
    return np.frombuffer(raw, dtype=dt, count=count, offset=offset).reshape(dims)


def load_split(data_dir, prefix):
    x = read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % prefix))
    y = read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % prefix))
    if x.ndim != 3 or x.shape[1:] != (28, 28) or y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise ValueError("%s: unexpected shapes images %s labels %s" % (prefix, x.shape, y.shape))
    x = torch.from_numpy(x.astype(np.float32) / np.float32(255.0))  # [N,28,28] in [0,1]
    y = torch.from_numpy(y.astype(np.int64))
    return x, y


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

def build_model(name):
    if name == "logreg":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))
    raise ValueError(name)


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
