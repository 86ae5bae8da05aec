#!/usr/bin/env python3
"""Writes bank_mlp.onnx, the model of the bank example: a tabular MLP for the 61 inputs of
the German credit data as fedmesh reads a bank's CSV (9 numbers and 11 categorical columns
one-hot encoded into 52 columns by [data] categorical / categories), with a BatchNorm at its
input, so that each bank's raw figures (amounts in the thousands, 0/1 indicators) are
standardised inside the model. The BatchNorm tensors stay at each bank ([model] local =
["input_norm.*"], FedBN): they describe that bank's customers and never leave it. One
output logit (bad risk) for bce_with_logits. Exported for training
(TrainingMode.TRAINING, no constant folding), as docs/models.md says for models fedmesh trains.
  /usr/bin/python3 examples/bank/make_model.py [--out examples/bank/bank_mlp.onnx]
"""
import argparse
import os

import torch
from torch import nn

FEATURES = 61  # 9 numeric + 52 one-hot (bank.toml's categories lists)


class BankMLP(nn.Module):
    def __init__(self, features=FEATURES, hidden=16):
        super().__init__()
        self.input_norm = nn.BatchNorm1d(features)
        self.fc1 = nn.Linear(features, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(self.input_norm(x))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "bank_mlp.onnx"))
    args = ap.parse_args()
    torch.manual_seed(0)
    model = BankMLP().train()
    torch.onnx.export(model, torch.zeros(8, FEATURES), args.out, input_names=["x"],
                      output_names=["logit"], dynamic_axes={"x": {0: "N"}, "logit": {0: "N"}},
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
