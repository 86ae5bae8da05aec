from __future__ import annotations

import shutil
import tempfile
from typing import Iterator

import pytest

from fakenode import FakeNode


@pytest.fixture
def node() -> Iterator[FakeNode]:
    # A short directory of its own: AF_UNIX paths are limited to ~107 bytes.
    directory = tempfile.mkdtemp(prefix="fm-", dir="/tmp")
    n = FakeNode(directory)
    try:
        yield n
    finally:
        n.close()
        shutil.rmtree(directory, ignore_errors=True)
