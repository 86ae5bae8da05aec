"""Tensor lists of protocol 1: the header's ``tensors`` entries and the payload they describe.

Every tensor is C-order little-endian float32 and the payload is the tensors one after the
other, so a payload is exactly ``4 * sum(prod(shape))`` bytes. Incoming tensors become
read-only numpy views into the one received buffer (no copy per tensor); outgoing ones are
checked against the task's list (names, shapes, finite values) before a byte is sent, so a
mistake surfaces in the trainer as a ``ValueError`` naming the tensor instead of a rejected
task on the node.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, NamedTuple, Tuple

import numpy as np

from .errors import ProtocolError

DTYPE = np.dtype("<f4")
"""The only dtype of protocol 1: little-endian IEEE float32."""

Weights = Dict[str, np.ndarray]


class TensorSpec(NamedTuple):
    """One entry of a header's ``tensors`` list."""

    name: str
    shape: Tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": "float32"}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_specs(value: Any) -> List[TensorSpec]:
    """Parse a header's ``tensors`` list; anything malformed is a ``ProtocolError``."""
    if not isinstance(value, list):
        raise ProtocolError("'tensors' is not a list")
    specs: List[TensorSpec] = []
    seen = set()
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise ProtocolError(f"tensors[{i}] is not an object")
        name, shape, dtype = entry.get("name"), entry.get("shape"), entry.get("dtype")
        if not isinstance(name, str) or not name:
            raise ProtocolError(f"tensors[{i}] has no name")
        if name in seen:
            raise ProtocolError(f"tensor {name!r} is listed twice")
        seen.add(name)
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            raise ProtocolError(f"tensor {name!r} has shape {shape!r}, not a list of sizes >= 0")
        if dtype != "float32":
            raise ProtocolError(f"tensor {name!r} has dtype {dtype!r}; protocol 1 has only 'float32'")
        specs.append(TensorSpec(name, tuple(shape)))
    return specs


def payload_size(specs: List[TensorSpec]) -> int:
    """Bytes of the payload that ``specs`` describe."""
    return DTYPE.itemsize * sum(s.size for s in specs)


def unpack(specs: List[TensorSpec], payload: bytearray) -> Weights:
    """Read-only arrays over ``payload`` (whose length the caller checked), in list order."""
    weights: Weights = {}
    offset = 0
    for s in specs:
        if s.size:
            arr = np.frombuffer(payload, dtype=DTYPE, count=s.size, offset=offset).reshape(s.shape)
        else:
            arr = np.zeros(s.shape, dtype=DTYPE)
        arr.flags.writeable = False
        weights[s.name] = arr
        offset += s.size * DTYPE.itemsize
    return weights


def _first_nonfinite(arr: np.ndarray) -> str:
    index = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
    return f"{arr[index]} at index {list(index)}"


def pack(specs: List[TensorSpec], weights: Mapping[str, Any]) -> List[np.ndarray]:
    """Check ``weights`` against the task's ``specs`` and return them as C-contiguous
    little-endian float32 arrays in task order (no copy where they already are).

    Raises ``ValueError`` naming the first missing, extra or misshaped tensor, or the first
    non-finite value (including float64 values that overflow float32).
    """
    if not isinstance(weights, Mapping):
        raise ValueError(f"weights must be a mapping name -> array, not {type(weights).__name__}")
    wanted = {s.name for s in specs}
    missing = [s.name for s in specs if s.name not in weights]
    extra = [k for k in weights if k not in wanted]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ValueError(f"weights lack tensor {missing[0]!r} of the task{more}")
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise ValueError(f"weights hold tensor {extra[0]!r}, which the task does not have{more}")
    arrays = []
    for s in specs:
        arr = np.asarray(weights[s.name])
        if arr.dtype.kind not in "fiu":
            raise ValueError(f"tensor {s.name!r} has dtype {arr.dtype}; it must be numeric (sent as float32)")
        if arr.shape != s.shape:
            raise ValueError(f"tensor {s.name!r} has shape {list(arr.shape)}; the task's is {list(s.shape)}")
        arrays.append(arr)
    out = []
    for s, arr in zip(specs, arrays):
        with np.errstate(over="ignore", invalid="ignore"):
            arr = np.asarray(arr, dtype=DTYPE, order="C")
        if not np.isfinite(arr).all():
            raise ValueError(f"tensor {s.name!r} has a non-finite value as float32: {_first_nonfinite(arr)}")
        out.append(arr)
    return out
