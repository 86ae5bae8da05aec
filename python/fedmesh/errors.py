"""Errors of the trainer side.

Mistakes in the trainer's own reply are plain ``ValueError`` (caught before anything is
sent, so the trainer can fix the reply and try again). ``ProtocolError`` is for the other
direction: bytes from the node that are not a message of protocol 1. After one the
connection is closed, because the byte stream can no longer be trusted.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """The node sent something that is not a protocol-1 message."""
