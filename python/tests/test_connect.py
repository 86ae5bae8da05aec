"""fedmesh.connect: where the endpoint comes from, the hello, waiting for the node."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import List

import pytest

import fedmesh
from fakenode import FakeNode


def test_connect_without_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDMESH_TRAINER_ENDPOINT", raising=False)
    with pytest.raises(ValueError, match="no trainer endpoint.*FEDMESH_TRAINER_ENDPOINT"):
        fedmesh.connect()
    monkeypatch.setenv("FEDMESH_TRAINER_ENDPOINT", "")
    with pytest.raises(ValueError, match="no trainer endpoint"):
        fedmesh.connect()


@pytest.mark.parametrize(
    "endpoint, message",
    [("tcp://127.0.0.1:5555", r"not ipc://PATH"), ("ipc://relative/trainer.sock", r"must be absolute"), ("/tmp/x.sock", r"not ipc://")],
)
def test_connect_bad_endpoint(endpoint: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fedmesh.connect(endpoint)


def test_connect_bad_hello_fields() -> None:
    with pytest.raises(ValueError, match=r"num_examples must be an int >= 0, got -1"):
        fedmesh.connect("ipc:///nonexistent/s.sock", num_examples=-1)
    with pytest.raises(ValueError, match=r"name must be a str"):
        fedmesh.connect("ipc:///nonexistent/s.sock", name=3)  # type: ignore[arg-type]


def test_connect_uses_environment(node: FakeNode, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDMESH_TRAINER_ENDPOINT", node.endpoint)
    monkeypatch.setenv("FEDMESH_NODE_ID", "site7")
    node.start(lambda n: n.recv())
    with fedmesh.connect(num_examples=0) as site:
        assert site.endpoint == node.endpoint and site.node_id == "site7"
    header, payload = node.join()
    assert header == {"type": "hello", "protocol": 1, "num_examples": 0} and payload == b""


def test_connect_gives_up_after_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=r"cannot connect to the node at ipc:///nonexistent/fm/s.sock.*waited 0.3 s"):
        fedmesh.connect("ipc:///nonexistent/fm/s.sock", timeout=0.3)
    assert 0.25 < time.monotonic() - start < 3


def test_connect_waits_for_the_node_to_listen() -> None:
    directory = tempfile.mkdtemp(prefix="fm-", dir="/tmp")
    nodes: List[FakeNode] = []

    def late_node() -> None:
        time.sleep(0.3)
        n = FakeNode(directory)
        n.start(lambda n: n.recv()[0])
        nodes.append(n)

    late = threading.Thread(target=late_node, daemon=True)
    late.start()
    try:
        with fedmesh.connect("ipc://" + os.path.join(directory, "trainer.sock"), timeout=5, name="late"):
            pass
        late.join(5)
        assert nodes[0].join() == {"type": "hello", "protocol": 1, "name": "late"}
    finally:
        for n in nodes:
            n.close()
        shutil.rmtree(directory, ignore_errors=True)


def test_import_needs_no_torch() -> None:
    code = "import sys, fedmesh, fedmesh.torch; assert 'torch' not in sys.modules, 'torch imported'"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(fedmesh.__file__)))
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_fedmesh_torch_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import fedmesh.torch as fmt

    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    for call in (lambda: fmt.from_module(object()), lambda: fmt.load(object(), {}), lambda: fmt.to_state_dict({})):
        with pytest.raises(ImportError, match=r"fedmesh.torch needs PyTorch: apt install python3-torch"):
            call()
