"""onnxruntime check of exported models with the federation's normalization in front.

Usage: normalized_export.py TABLE_TEST_DIR IMAGE_TEST_DIR (folders kept by the tests
FederationNormalizesInputsWithTheFederationsStatistics and
FederationNormalizesImagesPerChannelForABuiltinModel; bench/normalized_export.sh runs them).
"""
import csv
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def main():
    tab, img = sys.argv[1], sys.argv[2]
    for d in (tab, img):
        m = onnx.load(d + "/global.onnx")
        onnx.checker.check_model(m, full_check=True)
        print(f"{d}: onnx.checker full_check OK; ops {sorted({n.op_type for n in m.graph.node})}")

    m = onnx.load(tab + "/global.onnx")
    mean = [numpy_helper.to_array(n.attribute[0].t) for n in m.graph.node
            if n.name == "fedmesh_input_norm_mean"][0]
    s = ort.InferenceSession(tab + "/global.onnx", providers=["CPUExecutionProvider"])
    rows, labels = [], []
    for i in (1, 2, 3):
        with open(f"{tab}/site-{i}.csv") as f:
            r = csv.reader(f)
            next(r)
            for line in r:
                rows.append([float(v) for v in line[:30]])
                labels.append(line[30] == "malignant")
    x, y = np.array(rows, dtype=np.float32), np.array(labels)
    name = s.get_inputs()[0].name
    out = s.run(None, {name: x})[0].reshape(-1)
    acc = ((out > 0) == y).mean()
    holes, filled = x.copy(), x.copy()
    for r in range(0, len(x), 2):
        j = 3 + (r % 5) * 6
        holes[r, j] = np.nan
        filled[r, j] = mean[j]
    a = s.run(None, {name: holes})[0].reshape(-1)
    b = s.run(None, {name: filled})[0].reshape(-1)
    diff = float(np.abs(a - b).max())
    print(f"table: {len(y)} raw rows, onnxruntime accuracy {acc:.4f}; with a NaN cell in every "
          f"second row: max |output - output with the mean filled in| = {diff}, accuracy "
          f"{((a > 0) == y).mean():.4f}")

    s = ort.InferenceSession(img + "/global.onnx", providers=["CPUExecutionProvider"])
    xs, ys = [], []
    for i in (1, 2, 3):
        z = np.load(f"{img}/site-{i}.npz")
        xs.append(z["x"])
        ys.append(z["y"])
    x = np.ascontiguousarray(np.concatenate(xs).transpose(0, 3, 1, 2))
    y = np.concatenate(ys)
    out = s.run(None, {s.get_inputs()[0].name: x})[0]
    img_acc = (out.argmax(1) == y).mean()
    print(f"images: input {s.get_inputs()[0].shape}, {len(y)} raw images (NCHW), onnxruntime "
          f"accuracy {img_acc:.4f}")
    ok = acc >= 0.85 and diff == 0.0 and np.isfinite(a).all() and img_acc >= 0.9
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
