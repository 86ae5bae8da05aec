"""The connection to ``fedmesh-node``: connect, say hello, receive tasks, send answers.

The node listens on a Unix-domain stream socket (``ipc://PATH``, never TCP) and the
trainer connects to it: the node puts the endpoint in ``FEDMESH_TRAINER_ENDPOINT`` for a
trainer it launches, and a trainer the site runs itself names it (``[train]
external_endpoint``). One ``Site`` is one connection; use it from one thread.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

from . import frame
from .errors import ProtocolError
from .task import Task, check_num_examples
from .tensors import parse_specs, payload_size, unpack

PROTOCOL = 1
ENDPOINT_ENV = "FEDMESH_TRAINER_ENDPOINT"
NODE_ID_ENV = "FEDMESH_NODE_ID"
_TASK_TYPES = ("fit", "evaluate")


def endpoint_path(endpoint: str) -> str:
    """The socket path of an ``ipc:///absolute/path`` endpoint."""
    if not isinstance(endpoint, str) or not endpoint.startswith("ipc://"):
        raise ValueError(f"trainer endpoint {endpoint!r} is not ipc://PATH (the node speaks to trainers over local IPC only)")
    path = endpoint[len("ipc://"):]
    if not os.path.isabs(path):
        raise ValueError(f"trainer endpoint {endpoint!r}: the path must be absolute (ipc:///...)")
    return path


def connect(
    endpoint: Optional[str] = None,
    timeout: float = 30.0,
    *,
    num_examples: Optional[int] = None,
    name: Optional[str] = None,
) -> "Site":
    """Connect to the node and say hello.

    ``endpoint`` defaults to ``$FEDMESH_TRAINER_ENDPOINT``. Waits up to ``timeout`` seconds
    for the node's socket to appear and accept (a trainer the site runs may start before
    the node); after that, reads block for as long as the node takes to send a task.
    ``num_examples`` (the site's training examples, >= 0) and ``name`` go in the hello;
    the node registers with the aggregator with that count.
    """
    if endpoint is None:
        endpoint = os.environ.get(ENDPOINT_ENV) or None
    if endpoint is None:
        raise ValueError(
            f"no trainer endpoint: pass fedmesh.connect('ipc:///path/to/socket') or run under "
            f"fedmesh-node, which sets {ENDPOINT_ENV}"
        )
    path = endpoint_path(endpoint)
    hello: Dict[str, Any] = {"type": "hello", "protocol": PROTOCOL}
    if num_examples is not None:
        hello["num_examples"] = check_num_examples(num_examples, minimum=0)
    if name is not None:
        if not isinstance(name, str):
            raise ValueError(f"name must be a str, got {name!r}")
        hello["name"] = name

    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(deadline - time.monotonic(), 0.05))
            sock.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError) as e:
            sock.close()
            left = deadline - time.monotonic()
            if left <= 0:
                raise ConnectionError(
                    f"cannot connect to the node at {endpoint}: {e.strerror} (waited {timeout:g} s)"
                ) from e
            time.sleep(min(0.1, left))
        except BaseException:
            sock.close()
            raise
    sock.settimeout(None)
    site = Site(sock, endpoint)
    try:
        site._send(hello, [])
    except BaseException:
        site.close()
        raise
    return site


class Site:
    """An open connection to the node. Iterate ``tasks()``; close it (or use ``with``)."""

    def __init__(self, sock: socket.socket, endpoint: str) -> None:
        self._sock: Optional[socket.socket] = sock
        self.endpoint = endpoint
        self.node_id: Optional[str] = os.environ.get(NODE_ID_ENV)
        """``$FEDMESH_NODE_ID`` when the node launched this trainer."""

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        """Close the connection (idempotent). The node fails a task left unanswered."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def __enter__(self) -> "Site":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _send(self, header: Dict[str, Any], tensors: List[np.ndarray]) -> None:
        if self._sock is None:
            raise RuntimeError("the connection to the node is closed")
        frame.send_frame(self._sock, header, tensors)

    def tasks(self) -> Iterator[Task]:
        """Yield the node's tasks as they come (blocking in between).

        Ends, closing the connection, when the node sends ``shutdown`` or closes its end.
        Raises ``ProtocolError`` (and closes) on bytes that are not a protocol-1 message.
        A task still unanswered when the loop asks for the next one is failed first.
        """
        while self._sock is not None:
            try:
                task = self._receive()
            except ProtocolError:
                self.close()
                raise
            if task is None:
                self.close()
                return
            yield task
            if not task.answered and self._sock is not None:
                task.fail(f"the trainer moved on without answering task {task.id}")

    def _receive(self) -> Optional[Task]:
        assert self._sock is not None
        got = frame.recv_header(self._sock)
        if got is None:
            return None
        header, payload_length = got
        kind = header.get("type")
        if kind == "shutdown":
            if payload_length:
                raise ProtocolError(f"shutdown message with a {payload_length}-byte payload")
            return None
        if kind not in _TASK_TYPES:
            raise ProtocolError(f"unknown message type {kind!r} (expected fit, evaluate or shutdown)")
        specs = parse_specs(header.get("tensors", []))
        expected = payload_size(specs)
        if payload_length != expected:
            raise ProtocolError(
                f"{kind} task announces a {payload_length}-byte payload; its {len(specs)} tensors take {expected}"
            )
        payload = frame.recv_payload(self._sock, payload_length)
        return Task(self, header, specs, unpack(specs, payload))
