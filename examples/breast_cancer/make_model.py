#!/usr/bin/env python3
"""Writes hospital_mlp.onnx, the model of the hospital example: a tabular MLP for the 30
Wisconsin breast-cancer features with a BatchNorm at its input, so that each hospital's raw
measurements (areas in the thousands, smoothness near 0.1) are standardised inside the model.
The BatchNorm tensors stay at each hospital ([model] local = ["input_norm.*"], FedBN): they
describe that hospital's population and never leave it. One output logit for
bce_with_logits. Exported for training (TrainingMode.TRAINING, no constant folding), as
docs/models.md says for models fedmesh trains.
  /usr/bin/python3 examples/breast_cancer/make_model.py [--out examples/breast_cancer/hospital_mlp.onnx]
"""
import argparse
import os

import torch
from torch import nn


class HospitalMLP(nn.Module):
    def __init__(self, features=30, hidden=16):
        super().__init__()
        self.input_norm = nn.BatchNorm1d(features)
        self.fc1 = nn.Linear(features, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(self.input_norm(x))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "hospital_mlp.onnx"))
    args = ap.parse_args()
    torch.manual_seed(0)
    model = HospitalMLP().train()
    torch.onnx.export(model, torch.zeros(8, 30), args.out, input_names=["x"], output_names=["logit"],
                      dynamic_axes={"x": {0: "N"}, "logit": {0: "N"}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
