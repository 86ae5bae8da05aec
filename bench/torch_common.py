"""What the PyTorch baselines in bench/ share: Debian's OpenMP OpenBLAS preloaded before
torch (preload_blas), real Fashion-MNIST from its IDX files (load_split) and fedmesh's
reference architectures (build_model).  Call preload_blas() before anything imports torch."""

import gzip
import os
import struct
import sys

OPENBLAS_OPENMP_DIR = "/usr/lib/x86_64-linux-gnu/openblas-openmp"


def preload_blas(threads, blas="openmp"):
    # Thread pools.  torch's intra-op pool is OpenMP (libgomp); its GEMMs (nn.Linear) go to
    # OpenBLAS.  Debian's default OpenBLAS alternative is the *pthread* build, which keeps a
    # second pool of spinning threads that torch.set_num_threads() does not control: with both
    # pools at 2 threads on a 2-core machine they fight, and throughput drops 3-50x and becomes
    # erratic.  fedmesh links the OpenMP build of OpenBLAS for exactly this reason, so by default
    # we preload that build (RTLD_GLOBAL, before torch is imported: the dynamic linker then
    # satisfies torch's libblas.so.3 / liblapack.so.3 / libopenblas.so.0 NEEDED entries with the
    # already-loaded objects of the same soname) and the GEMMs run on torch's OpenMP pool.
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, str(threads))
    if blas == "openmp":
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


def read_idx(path):
    """Read a (gzipped) IDX file: magic 0x00 0x00 <dtype> <ndim>, ndim big-endian u32 dims."""
    import numpy as np

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
    import numpy as np
    import torch

    x = read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % prefix))
    y = read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % prefix))
    if x.ndim != 3 or x.shape[1:] != (28, 28) or y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise ValueError("%s: unexpected shapes images %s labels %s" % (prefix, x.shape, y.shape))
    x = torch.from_numpy(x.astype(np.float32) / np.float32(255.0))  # [N,28,28] in [0,1]
    y = torch.from_numpy(y.astype(np.int64))
    return x, y


def build_model(name):
    import torch.nn as nn

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
