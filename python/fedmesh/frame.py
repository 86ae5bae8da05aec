"""The wire frame of protocol 1, both ways (docs/external-trainer.md, "Message format").

A frame is ``b"FMTR"``, the header length (uint32 LE), the payload length (uint64 LE), a
UTF-8 JSON object, then the payload. This module only moves frames; what the header means
is up to ``site``/``task`` and what the payload holds is up to ``tensors``.

Sending writes the header and then each tensor's own buffer (``socket.sendall`` on a
memoryview), so a model is never concatenated into one big copy. Receiving reads the
header first, so the caller can check the announced payload length against the tensors the
header lists before allocating anything, and then reads the payload with ``recv_into``
into one preallocated buffer.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from .errors import ProtocolError

MAGIC = b"FMTR"
_LENGTHS = struct.Struct("<IQ")  # header_length, payload_length
MIN_HEADER = 2
MAX_HEADER = 1 << 20  # 1 MiB


def encode_header(header: Mapping[str, Any]) -> bytes:
    """Serialise ``header`` as compact UTF-8 JSON; NaN/Infinity are not JSON and refused."""
    return json.dumps(header, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def send_frame(sock: socket.socket, header: Mapping[str, Any], tensors: Sequence[np.ndarray] = ()) -> None:
    """Send one frame. ``tensors`` must already be C-contiguous little-endian float32."""
    body = encode_header(header)
    if not MIN_HEADER <= len(body) <= MAX_HEADER:
        raise ValueError(f"message header is {len(body)} bytes; protocol 1 allows {MIN_HEADER}..{MAX_HEADER}")
    payload_length = sum(int(t.nbytes) for t in tensors)
    sock.sendall(MAGIC + _LENGTHS.pack(len(body), payload_length) + body)
    for t in tensors:
        if t.nbytes:
            # A flat byte view of the array's own memory: no copy.
            sock.sendall(memoryview(t.reshape(-1).view(np.uint8)))


def _recv_exact(sock: socket.socket, buf: bytearray, *, eof_ok: bool = False) -> bool:
    """Fill ``buf`` from ``sock``. Returns False on EOF before the first byte if ``eof_ok``."""
    view = memoryview(buf)
    got = 0
    while got < len(buf):
        n = sock.recv_into(view[got:])
        if n == 0:
            if got == 0 and eof_ok:
                return False
            raise ProtocolError(f"the node closed the connection in the middle of a message ({got} of {len(buf)} bytes)")
        got += n
    return True


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _no_constants(name: str) -> Any:
    raise ProtocolError(f"message header holds {name}, which is not JSON")


def recv_header(sock: socket.socket) -> Optional[Tuple[Dict[str, Any], int]]:
    """Read a frame's header: ``(header, payload_length)``, or None on EOF between frames.

    The payload is left in the socket for ``recv_payload``.
    """
    magic = bytearray(len(MAGIC))
    if not _recv_exact(sock, magic, eof_ok=True):
        return None
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {bytes(magic)!r} (expected {MAGIC!r}): the peer does not speak the fedmesh trainer protocol")
    lengths = bytearray(_LENGTHS.size)
    _recv_exact(sock, lengths)
    header_length, payload_length = _LENGTHS.unpack(lengths)
    if not MIN_HEADER <= header_length <= MAX_HEADER:
        raise ProtocolError(f"header length {header_length} outside {MIN_HEADER}..{MAX_HEADER}")
    raw = bytearray(header_length)
    _recv_exact(sock, raw)
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except UnicodeDecodeError as e:
        raise ProtocolError(f"message header is not UTF-8: {e}") from None
    except json.JSONDecodeError as e:
        raise ProtocolError(f"message header is not JSON: {e}") from None
    if not isinstance(header, dict):
        kind = _JSON_KINDS.get(type(header), type(header).__name__)
        raise ProtocolError(f"message header is a JSON {kind}, not an object")
    return header, payload_length


def recv_payload(sock: socket.socket, length: int) -> bytearray:
    """Read a payload whose length the caller has already checked."""
    buf = bytearray(length)
    _recv_exact(sock, buf)
    return buf
