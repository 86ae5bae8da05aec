#!/usr/bin/env python3
"""Checks for bench/onnx_roundtrip.sh (import an ONNX model, train, export, run elsewhere).

  check FILE.onnx
      onnx.checker.check_model(full_check=True) on the file fedmesh wrote, and a summary
      of it. Needs the onnx package: Debian's /usr/bin/python3 (python3-onnx).
  compare --model FILE.onnx --metrics M.jsonl
      Runs onnxruntime on the Fashion-MNIST test set (10k, pixels/255, [N,1,28,28]) with
      FILE.onnx, computes accuracy and mean cross-entropy of output 0 (logits), and compares
      them with the test_accuracy / test_loss of the last line of fedmesh's --metrics file.
      PASS when |accuracy difference| < --tolerance (default 0.0005: the same to 3
      decimals); exit status 0 on PASS, 1 on FAIL. Needs onnxruntime and numpy only (the
      interpreter of ORT_PYTHON in the .sh), never torch.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import read_idx  # noqa: E402  (numpy only; no torch import)


def cmd_check(a):
    import onnx

    proto = onnx.load(a.model)
    onnx.checker.check_model(proto, full_check=True)
    opset = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    ops = {}
    for n in proto.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    print("onnx.checker (full_check): OK  %s: ir_version %d, opset %s, producer '%s', %d nodes, "
          "%d initializers" % (a.model, proto.ir_version, opset[0] if opset else "?",
                               proto.producer_name, len(proto.graph.node), len(proto.graph.initializer)))
    print("  ops: " + " ".join("%s x%d" % (k, v) for k, v in sorted(ops.items())))
    return 0


def last_metrics(path):
    with open(path) as f:
        lines = [l for l in f if l.strip()]
    if not lines:
        raise SystemExit("%s: no metrics lines (did fedmesh-node finish an epoch?)" % path)
    return json.loads(lines[-1])


def cmd_compare(a):
    import numpy as np
    import onnxruntime as ort

    m = last_metrics(a.metrics)
    x = read_idx(os.path.join(a.data_dir, "t10k-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(a.data_dir, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    x = (x.astype(np.float32) / np.float32(255.0)).reshape(-1, 1, 28, 28)

    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(a.model, sess_options=so, providers=["CPUExecutionProvider"])
    in_name = sess.get_inputs()[0].name
    t0 = time.perf_counter()
    logits = np.concatenate([sess.run(None, {in_name: x[s:s + a.batch]})[0]
                             for s in range(0, x.shape[0], a.batch)])
    seconds = time.perf_counter() - t0
    if logits.shape != (x.shape[0], 10):
        raise SystemExit("output 0 has shape %s, expected (%d, 10) logits" % (logits.shape, x.shape[0]))
    z = logits.astype(np.float64)
    zmax = z.max(axis=1, keepdims=True)
    lse = zmax[:, 0] + np.log(np.exp(z - zmax).sum(axis=1))
    ort_loss = float(np.mean(lse - z[np.arange(z.shape[0]), y]))
    ort_acc = float(np.mean(z.argmax(axis=1) == y))
    fm_acc, fm_loss = float(m["test_accuracy"]), float(m["test_loss"])
    d_acc, d_loss = abs(ort_acc - fm_acc), abs(ort_loss - fm_loss)
    ok = d_acc < a.tolerance

    print("onnxruntime %s on %s: %d test samples in %.2f s (%d thread(s))"
          % (ort.__version__, a.model, x.shape[0], seconds, a.threads))
    print("%-12s %10s %10s" % ("", "accuracy", "loss"))
    print("%-12s %10.4f %10.6f" % ("fedmesh", fm_acc, fm_loss))
    print("%-12s %10.4f %10.6f" % ("onnxruntime", ort_acc, ort_loss))
    print("%-12s %10.4f %10.2e" % ("|diff|", d_acc, d_loss))
    print("%s: |accuracy diff| %.4f %s %.4f (fedmesh %.3f, onnxruntime %.3f)"
          % ("PASS" if ok else "FAIL", d_acc, "<" if ok else ">=", a.tolerance, fm_acc, ort_acc))
    if a.json:
        print(json.dumps({"fedmesh_test_accuracy": fm_acc, "fedmesh_test_loss": fm_loss,
                          "ort_test_accuracy": ort_acc, "ort_test_loss": ort_loss,
                          "abs_diff_accuracy": d_acc, "abs_diff_loss": d_loss,
                          "tolerance": a.tolerance, "pass": ok, "ort_version": ort.__version__}))
    return 0 if ok else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="onnx.checker on a model (needs the onnx package)")
    c.add_argument("model")
    r = sub.add_parser("compare", help="onnxruntime test metrics vs fedmesh's --metrics")
    r.add_argument("--model", required=True, help="the .onnx fedmesh-node --save-model wrote")
    r.add_argument("--metrics", required=True, help="fedmesh-node --metrics file (last line is used)")
    r.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    r.add_argument("--tolerance", type=float, default=0.0005, help="max |accuracy diff| (default 0.0005)")
    r.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads (default 2)")
    r.add_argument("--batch", type=int, default=1000, help="evaluation batch (default 1000)")
    r.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    a = p.parse_args(argv)
    return cmd_check(a) if a.cmd == "check" else cmd_compare(a)


if __name__ == "__main__":
    sys.exit(main())
