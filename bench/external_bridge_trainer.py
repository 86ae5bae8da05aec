#!/usr/bin/python3
"""The trainer side of bench/external_bridge.cc: answers every fit task with its weights
plus one, timing only that "training" (reported as metrics.train_seconds), so the bench can
subtract it from the node's round trip. With --torch the weights also go through
fedmesh.torch into a module and back out, as examples/pytorch/train.py does: that
conversion is part of the bridge and is not subtracted."""
import argparse
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(here, "..", "python"))
import numpy as np  # noqa: E402
import fedmesh  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--torch", action="store_true")
a = p.parse_args()
module = None
with fedmesh.connect(name="bench") as site:
    for task in site.tasks():
        if a.torch:
            import torch
            import fedmesh.torch
            if module is None:  # parameter names may not hold dots: layer0.weight -> layer0_weight
                module = torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(torch.zeros(v.shape))
                                                 for k, v in task.weights.items()})
            fedmesh.torch.load(module, {k.replace(".", "_"): v for k, v in task.weights.items()})
            t0 = time.perf_counter()
            with torch.no_grad():
                for prm in module.values():
                    prm.add_(1.0)
            train_s = time.perf_counter() - t0
            out = {k.replace("_", "."): v for k, v in fedmesh.torch.from_module(module).items()}
        else:
            t0 = time.perf_counter()
            out = {k: v + np.float32(1) for k, v in task.weights.items()}
            train_s = time.perf_counter() - t0
        task.reply(weights=out, num_examples=1, metrics={"train_seconds": train_s})
