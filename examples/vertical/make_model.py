#!/usr/bin/env python3
"""Writes the three parts of the vertical example's model (docs/vertical.md):
  hospital_bottom.onnx  the hospital's 10 *_mean measurements -> 8 values
  lab_bottom.onnx       the lab's 20 *_se / *_worst measurements -> 8 values
  top.onnx              the 16 concatenated values (hospital's first) -> one logit
  top_sum.onnx          the 8 summed values ([split] combine = "sum") -> one logit
Each bottom model opens with a BatchNorm, so each party's raw measurements (areas in the
thousands, smoothness near 0.1) are standardised inside its own part with statistics that
never leave it. Exported for training (TrainingMode.TRAINING, no constant folding), as
docs/models.md says for models fedmesh trains.
  /usr/bin/python3 examples/vertical/make_model.py [--out-dir examples/vertical]
"""
import argparse
import os

import torch
from torch import nn


def bottom(features, hidden=16, out=8):
    return nn.Sequential(nn.BatchNorm1d(features), nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, out))


def export(model, features, path, in_name, out_name):
    model.train()
    torch.onnx.export(model, torch.zeros(8, features), path, input_names=[in_name], output_names=[out_name],
                      dynamic_axes={in_name: {0: "N"}, out_name: {0: "N"}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    torch.manual_seed(0)
    export(bottom(10), 10, os.path.join(args.out_dir, "hospital_bottom.onnx"), "x", "h")
    export(bottom(20), 20, os.path.join(args.out_dir, "lab_bottom.onnx"), "x", "h")
    export(nn.Linear(16, 1), 16, os.path.join(args.out_dir, "top.onnx"), "h", "logit")
    export(nn.Linear(8, 1), 8, os.path.join(args.out_dir, "top_sum.onnx"), "h", "logit")


if __name__ == "__main__":
    main()
