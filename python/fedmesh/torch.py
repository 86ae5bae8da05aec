"""Map protocol weights to a PyTorch module and back.

The federation's model is the trainer's module exported to ONNX with its ``state_dict``
names kept (``conv1.weight``, ``bn1.running_mean``, ...), so those names are what the node
and the trainer exchange. Only floating-point entries travel: integer buffers such as
BatchNorm's ``num_batches_tracked`` stay with the module.

PyTorch is imported when a function here is first called, so ``import fedmesh.torch``
works (and ``fedmesh`` stays numpy-only) on a machine without it.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Dict, Mapping

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch as _torch_t

_MISSING_TORCH = "fedmesh.torch needs PyTorch: apt install python3-torch"


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ImportError(_MISSING_TORCH) from e
    return torch


def _floating(state: Mapping[str, "_torch_t.Tensor"]) -> Dict[str, "_torch_t.Tensor"]:
    return {k: v for k, v in state.items() if v.is_floating_point()}


def from_module(module: "_torch_t.nn.Module") -> Dict[str, np.ndarray]:
    """Every floating-point ``state_dict`` entry of ``module`` as a float32 numpy array.

    The arrays are copies on the CPU, detached from autograd, so later training does not
    change them.
    """
    torch = _torch()
    with torch.no_grad():
        return {
            name: t.detach().to(device="cpu", dtype=torch.float32, copy=True).numpy()
            for name, t in _floating(module.state_dict()).items()
        }


def to_state_dict(weights: Mapping[str, Any]) -> Dict[str, "_torch_t.Tensor"]:
    """``weights`` as float32 CPU tensors (copies: task weights are read-only)."""
    torch = _torch()
    return {name: torch.tensor(np.asarray(a, dtype=np.float32)) for name, a in weights.items()}


def load(module: "_torch_t.nn.Module", weights: Mapping[str, Any]) -> None:
    """Copy ``weights`` into ``module`` in place.

    The names must be exactly the module's floating-point ``state_dict`` keys and every
    shape must match; otherwise ``ValueError`` names the first missing and first unexpected
    tensor, or the first misshaped one with both shapes, and the module is left unchanged.
    Values are converted to each parameter's own dtype and device; integer buffers keep
    their values.
    """
    torch = _torch()
    full = module.state_dict()  # also holds integer buffers and the modules' version metadata
    state = _floating(full)
    missing = [k for k in state if k not in weights]
    unexpected = [k for k in weights if k not in state]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (first {missing[0]!r})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected (first {unexpected[0]!r})")
        raise ValueError(
            f"weights do not match {type(module).__name__}'s state_dict: " + ", ".join(parts)
        )
    arrays = {k: np.asarray(weights[k], dtype=np.float32) for k in state}
    bad = [k for k in state if tuple(arrays[k].shape) != tuple(state[k].shape)]
    if bad:
        k = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ValueError(
            f"tensor {k!r} has shape {list(arrays[k].shape)}; "
            f"{type(module).__name__} expects {list(state[k].shape)}{more}"
        )
    with warnings.catch_warnings():
        # Task weights are read-only views; torch only reads them here (copy_ into the module).
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for k, a in arrays.items():
            full[k] = torch.from_numpy(a)
    with torch.no_grad():
        # The whole state_dict, so integer buffers reload their own values (BatchNorm resets
        # num_batches_tracked when it is absent) and names were checked above.
        module.load_state_dict(full)
