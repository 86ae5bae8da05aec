#!/usr/bin/python3
"""PyTorch models for Fashion-MNIST that a site exports to ONNX and fedmesh trains.

A site writes its model as an ordinary torch.nn.Module, exports it once with
export() (a training-mode export: BatchNorm and Dropout stay trainable, nothing is
constant-folded, the batch dimension is dynamic) and points fedmesh at the file:

    /usr/bin/python3 examples/pytorch/models.py --out build/models
    build/bin/fedmesh-node --local-only --model build/models/fmnist_resnet.onnx ...

The models take x: float [N,1,28,28] with pixels in [0,1] and return logits [N,10]
(fedmesh applies softmax cross-entropy to output 0).  Needs Debian's python3-torch
(1.13) and python3-onnx (1.12): run it with /usr/bin/python3, not the pyenv python3.
The files are deterministic (fixed seed): the same torch version writes the same bytes.
"""

import argparse
import copy
import os
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

INPUT_SHAPE = (1, 28, 28)
NUM_CLASSES = 10


class FmnistMLP(nn.Module):
    """784-256-10 with ReLU: the architecture of fedmesh's built-in `--model mlp --hidden 256`."""

    def __init__(self, hidden=256):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(28 * 28, hidden)
        self.fc2 = nn.Linear(hidden, NUM_CLASSES)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(self.flatten(x))))


class ResidualBlock(nn.Module):
    """Conv3x3-BN-ReLU-Conv3x3-BN, plus the input, then ReLU (channels and size kept)."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + x)


class FmnistResNet(nn.Module):
    """A small residual CNN for [N,1,28,28]:
    Conv3x3(1->c1)-BN-ReLU, 2 residual blocks at c1 (28x28), stride-2 Conv3x3(c1->c2)-BN-ReLU
    (14x14), 1 residual block at c2, MaxPool 2 (7x7), global average pool, Linear(c2, 10).
    The convolutions have no bias (each is followed by BatchNorm, whose shift plays its part)."""

    def __init__(self, c1=16, c2=32):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, c1, 3, padding=1, bias=False), nn.BatchNorm2d(c1),
                                  nn.ReLU())
        self.stage1 = nn.Sequential(ResidualBlock(c1), ResidualBlock(c1))
        self.down = nn.Sequential(nn.Conv2d(c1, c2, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(c2), nn.ReLU())
        self.stage2 = ResidualBlock(c2)
        self.pool = nn.MaxPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(c2, NUM_CLASSES)

    def forward(self, x):
        h = self.stage1(self.stem(x))
        h = self.stage2(self.down(h))
        return self.fc(self.flatten(self.gap(self.pool(h))))


class FmnistCNN(nn.Module):
    """A plain CNN for [N,1,28,28]: Conv5x5(1->16)-ReLU-MaxPool2, Conv5x5(16->32)-ReLU-MaxPool2,
    Linear(512, 64)-ReLU, Linear(64, 10). 47k parameters; what examples/pytorch/train.py
    trains at each site when the node hands training to PyTorch ([train] external)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, NUM_CLASSES)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(h, 1))))


MODELS = {"fmnist_mlp": FmnistMLP, "fmnist_resnet": FmnistResNet, "fmnist_cnn": FmnistCNN}


def build(name, seed=0):
    """The model `name` (a key of MODELS) with its parameters drawn from torch's default
    initialisers under `seed`."""
    torch.manual_seed(seed)
    return MODELS[name]()


def example_input(batch=2):
    return torch.zeros((batch,) + INPUT_SHAPE)


def export(path, model, example_input, opset=17, training=True):
    """Write `model` to `path` as ONNX in the form fedmesh trains: training mode (BatchNorm
    with its running statistics as outputs, Dropout kept), no constant folding (so every
    parameter stays an initializer named by its state_dict key), input 'x' and output 'y'
    with a dynamic batch dimension 'N'.  `model` itself is not changed."""
    m = copy.deepcopy(model)  # the export traces a train-mode forward, which updates BN stats
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 1.13 warns about training-mode exports
        torch.onnx.export(
            m, (example_input,), path,
            export_params=True,
            opset_version=opset,
            training=mode,
            do_constant_folding=False,
            keep_initializers_as_inputs=False,
            input_names=["x"],
            output_names=["y"],
            dynamic_axes={"x": {0: "N"}, "y": {0: "N"}},
        )
    if training:
        _restore_initializers(path, model)


def _restore_initializers(path, model):
    # torch 1.13 reads the initializers *after* the trace's train-mode forward, so the file
    # would hold BatchNorm running statistics already updated once on example_input (and
    # num_batches_tracked + 1). Put the model's own values back.
    import numpy as np
    import onnx
    from onnx import numpy_helper

    state = model.state_dict()
    proto = onnx.load(path)
    changed = False
    for init in proto.graph.initializer:
        if init.name in state:
            want = state[init.name].detach().cpu().numpy()
            if not np.array_equal(numpy_helper.to_array(init), want):
                init.CopyFrom(numpy_helper.from_array(want, init.name))
                changed = True
    if changed:
        onnx.save(proto, path)


def main(argv=None):
    p = argparse.ArgumentParser(description="Export the example PyTorch models to ONNX for fedmesh")
    p.add_argument("--out", required=True, help="directory to write <model>.onnx into (created)")
    p.add_argument("--models", default=",".join(MODELS),
                   help="comma-separated subset of: %s (default: all)" % ", ".join(MODELS))
    p.add_argument("--seed", type=int, default=0, help="parameter initialisation seed (default 0)")
    p.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    a = p.parse_args(argv)
    names = [n for n in a.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error("unknown model(s) %s; choose from %s" % (", ".join(unknown), ", ".join(MODELS)))
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    for name in names:
        model = build(name, a.seed)
        path = os.path.join(a.out, name + ".onnx")
        export(path, model, example_input(), opset=a.opset)
        params = sum(t.numel() for t in model.parameters())
        print("%s: %d parameters -> %s" % (name, params, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
