#!/usr/bin/env python3
"""The vertical example's exported model in onnxruntime (a reference check, not a fedmesh
dependency): the whole model on joined rows equals the three parts run in turn, and its AUC on
the shared patients.
  python3 -m venv /tmp/ort && /tmp/ort/bin/pip install onnxruntime numpy
  /tmp/ort/bin/python examples/vertical/check_onnxruntime.py RUN_DIR   # the run.sh run directory
"""
import csv, sys
import numpy as np
import onnxruntime as ort

run = sys.argv[1]
def table(path):
    with open(path) as f:
        r = list(csv.reader(f))
    return r[0], {row[0]: row[1:] for row in r[1:]}
hh, hosp = table(f"{run}/data/hospital.csv")
lh, lab = table(f"{run}/data/lab.csv")
ids = sorted(set(hosp) & set(lab))
xh = np.array([[float(v) for v in hosp[i][:10]] for i in ids], dtype=np.float32)
xl = np.array([[float(v) for v in lab[i]] for i in ids], dtype=np.float32)
y = np.array([1 if hosp[i][10] == "malignant" else 0 for i in ids])
def run_model(path, x):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]
parts = run_model(f"{run}/top_part.onnx", np.concatenate([run_model(f"{run}/hospital_part.onnx", xh),
                                                         run_model(f"{run}/lab_part.onnx", xl)], axis=1))
whole = run_model(f"{run}/whole_model.onnx", np.concatenate([xh, xl], axis=1))
order = np.argsort(-whole[:, 0]); pos = y[order]
tp = np.cumsum(pos); fp = np.cumsum(1 - pos)
auc = np.trapezoid(tp / pos.sum(), fp / (1 - pos).sum())
print(f"{len(ids)} shared patients; max |whole - parts in turn| = {np.abs(whole - parts).max():.2e}; "
      f"AUC of the whole model on them (train and held-out rows) = {auc:.4f}")
