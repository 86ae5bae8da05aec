"""A fake fedmesh-node for the tests: the node side of protocol 1 over a real Unix socket.

Written against docs/external-trainer.md with ``struct`` and ``json`` only (no fedmesh
code), so the tests check fedmesh against the format, not against itself. A test gives
``start`` a script that plays the node on the accepted connection in a thread, runs the
trainer side in the test itself, then ``join``s to get what the script returned.
"""

from __future__ import annotations

import json
import math
import os
import socket
import struct
import threading
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

TIMEOUT = 10.0


class FakeNode:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "trainer.sock")
        self.endpoint = "ipc://" + self.path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(TIMEOUT)
        self.conn: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None
        self._result: Any = None
        self._error: Optional[BaseException] = None

    # -- running a script ------------------------------------------------------------
    def start(self, script: Callable[["FakeNode"], Any]) -> None:
        def run() -> None:
            try:
                self.conn, _ = self.listener.accept()
                self.conn.settimeout(TIMEOUT)
                self._result = script(self)
            except BaseException as e:  # reported by join()
                self._error = e
            finally:
                if self.conn is not None:
                    self.conn.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def join(self) -> Any:
        assert self._thread is not None
        self._thread.join(TIMEOUT * 2)
        assert not self._thread.is_alive(), "fake node script did not finish"
        if self._error is not None:
            raise self._error
        return self._result

    def close(self) -> None:
        self.listener.close()
        if self.conn is not None:
            self.conn.close()

    # -- the node side of the wire -----------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        assert self.conn is not None
        self.conn.sendall(data)

    def send(self, header: Dict[str, Any], payload: bytes = b"") -> None:
        self.send_raw(frame(header, payload))

    def send_task(self, kind: str, task_id: int, weights: Dict[str, np.ndarray], **fields: Any) -> None:
        self.send_raw(task_frame(kind, task_id, weights, **fields))

    def send_shutdown(self) -> None:
        self.send({"type": "shutdown"})

    def _recv_exact(self, n: int) -> bytes:
        assert self.conn is not None
        buf = b""
        while len(buf) < n:
            chunk = self.conn.recv(n - len(buf))
            if not chunk:
                raise EOFError(f"trainer closed after {len(buf)} of {n} bytes")
            buf += chunk
        return buf

    def recv(self) -> Tuple[Dict[str, Any], bytes]:
        """One frame from the trainer: (header, payload)."""
        magic = self._recv_exact(4)
        assert magic == b"FMTR", magic
        (hlen,) = struct.unpack("<I", self._recv_exact(4))
        (plen,) = struct.unpack("<Q", self._recv_exact(8))
        assert 2 <= hlen <= 1 << 20
        header = json.loads(self._recv_exact(hlen).decode("utf-8"))
        assert isinstance(header, dict)
        return header, self._recv_exact(plen)

    def recv_tensors(self) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
        """A frame whose payload is decoded by its header's tensor list (and checked to fit)."""
        header, payload = self.recv()
        tensors: Dict[str, np.ndarray] = {}
        offset = 0
        for t in header.get("tensors", []):
            assert t["dtype"] == "float32"
            n = math.prod(t["shape"])
            tensors[t["name"]] = np.frombuffer(payload, "<f4", n, offset).reshape(t["shape"])
            offset += 4 * n
        assert offset == len(payload), (offset, len(payload))
        return header, tensors

    def expect_eof(self) -> None:
        """The trainer closed its end (a reset counts: it closed with our bytes unread)."""
        assert self.conn is not None
        try:
            data = self.conn.recv(1)
        except ConnectionResetError:
            return
        assert data == b"", "trainer sent more"


def frame(header: Dict[str, Any], payload: bytes = b"") -> bytes:
    body = json.dumps(header).encode()
    return b"FMTR" + struct.pack("<I", len(body)) + struct.pack("<Q", len(payload)) + body + payload


def task_frame(kind: str, task_id: int, weights: Dict[str, np.ndarray], **fields: Any) -> bytes:
    """A fit/evaluate task as the node sends it: the fields of the doc's example, then the model."""
    header: Dict[str, Any] = {
        "type": kind, "task": task_id, "round": 3, "node_id": "site1", "epochs": 1,
        "steps": 0, "lr": 0.01, "batch": 32, "momentum": 0.9, "prox_mu": 0.0,
        "seed": 1234, "loss": "cross_entropy", "deadline_unix_ms": 1764160000000,
    }
    header.update(fields)
    header["tensors"] = [
        {"name": k, "shape": list(np.shape(v)), "dtype": "float32"} for k, v in weights.items()
    ]
    payload = b"".join(np.asarray(v, dtype="<f4").tobytes(order="C") for v in weights.values())
    return frame(header, payload)


def example_weights() -> Dict[str, np.ndarray]:
    return {
        "fc1.weight": np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
        "fc1.bias": np.array([0.5, -1.25], dtype=np.float32),
        "scale": np.array(3.0, dtype=np.float32),  # a scalar: shape []
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
