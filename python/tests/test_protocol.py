"""fedmesh against a fake node over a real Unix socket: tasks, replies, errors, framing."""

from __future__ import annotations

import json
import struct
from typing import Any, Dict

import numpy as np
import pytest

import fedmesh
from fakenode import FakeNode, example_weights, frame, task_frame


def _root(a: Any) -> Any:
    """The object that finally owns an array's memory."""
    while True:
        if isinstance(a, np.ndarray) and a.base is not None:
            a = a.base
        elif isinstance(a, memoryview):
            a = a.obj
        else:
            return a


def test_fit_round_trip(node: FakeNode) -> None:
    def script(n: FakeNode) -> Any:
        hello = n.recv()
        n.send_task("fit", 7, example_weights())
        result = n.recv_tensors()
        n.send_shutdown()
        n.expect_eof()  # the trainer closes after shutdown
        return hello, result

    node.start(script)
    seen = []
    with fedmesh.connect(node.endpoint, timeout=5, num_examples=6000, name="pytest") as site:
        for task in site.tasks():
            seen.append(task)
            assert (task.kind, task.id, task.round, task.node_id) == ("fit", 7, 3, "site1")
            assert (task.epochs, task.steps, task.batch, task.seed) == (1, 0, 32, 1234)
            assert (task.lr, task.momentum, task.prox_mu) == (0.01, 0.9, 0.0)
            assert (task.loss, task.deadline_unix_ms) == ("cross_entropy", 1764160000000)
            assert task.header["type"] == "fit" and task.header["task"] == 7
            assert list(task.weights) == list(example_weights())  # task order
            for name, want in example_weights().items():
                got = task.weights[name]
                assert got.dtype == np.float32 and got.shape == want.shape
                np.testing.assert_array_equal(got, want)
                assert not got.flags.writeable
            # All views into one received buffer, no per-tensor copies.
            nonempty = [a for a in task.weights.values() if a.size]
            assert len({id(_root(a)) for a in nonempty}) == 1
            assert isinstance(_root(nonempty[0]), bytearray)
            with pytest.raises(ValueError):
                task.weights["fc1.bias"][0] = 1.0
            # Answer in another order and dtype: sent in task order as float32.
            new = {k: np.asarray(v, dtype=np.float64) + 1 for k, v in reversed(list(task.weights.items()))}
            task.reply(weights=new, num_examples=6000, metrics={"loss": 0.41, "accuracy": np.float32(0.5)})
            assert task.answered
        assert site.closed
    assert len(seen) == 1

    (hello, hello_payload), (result, tensors) = node.join()
    assert hello == {"type": "hello", "protocol": 1, "num_examples": 6000, "name": "pytest"}
    assert hello_payload == b""
    assert result["type"] == "result" and result["task"] == 7 and result["num_examples"] == 6000
    assert result["metrics"] == {"loss": 0.41, "accuracy": 0.5}
    assert result["tensors"] == [
        {"name": "fc1.weight", "shape": [2, 3], "dtype": "float32"},
        {"name": "fc1.bias", "shape": [2], "dtype": "float32"},
        {"name": "scale", "shape": [], "dtype": "float32"},
        {"name": "empty", "shape": [0, 4], "dtype": "float32"},
    ]
    for name, want in example_weights().items():
        np.testing.assert_array_equal(tensors[name], want + 1)
    np.testing.assert_array_equal(tensors["fc1.weight"], [[1.0, 1.25, 1.5], [1.75, 2.0, 2.25]])
    assert float(tensors["scale"]) == 4.0


def test_large_and_noncontiguous_weights(node: FakeNode) -> None:
    rng = np.random.default_rng(0)
    big = rng.standard_normal((600, 500)).astype(np.float32)  # 1.2 MB: many recv_into calls

    def script(n: FakeNode) -> Any:
        n.recv()
        n.send_task("fit", 1, {"big": big, "small": np.ones(3, np.float32)})
        return n.recv_tensors()

    node.start(script)
    with fedmesh.connect(node.endpoint, timeout=5) as site:
        for task in site.tasks():
            np.testing.assert_array_equal(task.weights["big"], big)
            doubled_t = np.ascontiguousarray((task.weights["big"] * 2).T).T  # Fortran-order view
            assert not doubled_t.flags.c_contiguous
            task.reply(weights={"small": [1, 2, 3], "big": doubled_t}, num_examples=1)
    header, tensors = node.join()
    np.testing.assert_array_equal(tensors["big"], big * 2)
    np.testing.assert_array_equal(tensors["small"], [1.0, 2.0, 3.0])


def test_evaluate_reply(node: FakeNode) -> None:
    def script(n: FakeNode) -> Any:
        n.recv()
        n.send_task("evaluate", 9, example_weights())
        return n.recv()

    node.start(script)
    with fedmesh.connect(node.endpoint, timeout=5) as site:
        for task in site.tasks():
            assert task.kind == "evaluate" and task.id == 9
            np.testing.assert_array_equal(task.weights["fc1.bias"], [0.5, -1.25])
            with pytest.raises(ValueError, match="evaluate task's reply carries no weights"):
                task.reply(weights=dict(task.weights), num_examples=10)
            task.reply(num_examples=10, metrics={"loss": 1.5, "accuracy": 0.75, "auc.macro-1": 1})
    header, payload = node.join()
    assert header == {
        "type": "result", "task": 9, "num_examples": 10,
        "metrics": {"loss": 1.5, "accuracy": 0.75, "auc.macro-1": 1.0}, "tensors": [],
    }
    assert payload == b""


def _with(base: Dict[str, np.ndarray], **changes: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = dict(base)
    for k, v in changes.items():
        k = k.replace("__", ".")
        if v is None:
            del out[k]
        else:
            out[k] = v
    return out


def test_reply_validation(node: FakeNode) -> None:
    def script(n: FakeNode) -> Any:
        n.recv()
        n.send_task("fit", 5, example_weights())
        got = n.recv_tensors()
        n.send_shutdown()
        n.expect_eof()  # nothing but the one valid answer came
        return got

    node.start(script)
    good = example_weights()
    bad_replies = [
        (dict(weights=_with(good, fc1__bias=None), num_examples=1), r"lack tensor 'fc1.bias'"),
        (dict(weights=_with(good, fc1__bias=None, scale=None), num_examples=1), r"'fc1.bias' of the task \(and 1 more\)"),
        (dict(weights=_with(good, fc2__weight=np.ones(2)), num_examples=1), r"'fc2.weight', which the task does not have"),
        (dict(weights=_with(good, fc1__weight=np.ones((3, 2))), num_examples=1), r"'fc1.weight' has shape \[3, 2\]; the task's is \[2, 3\]"),
        (dict(weights=_with(good, scale=np.ones(1)), num_examples=1), r"'scale' has shape \[1\]; the task's is \[\]"),
        (dict(weights=_with(good, fc1__bias=np.array([0.0, np.nan])), num_examples=1), r"'fc1.bias' has a non-finite value as float32: nan at index \[1\]"),
        (dict(weights=_with(good, fc1__weight=np.full((2, 3), 1e300)), num_examples=1), r"'fc1.weight' has a non-finite value as float32: inf at index \[0, 0\]"),
        (dict(weights=_with(good, scale=np.array("x")), num_examples=1), r"'scale' has dtype"),
        (dict(weights=None, num_examples=1), r"needs its trained weights"),
        (dict(weights=[1, 2], num_examples=1), r"mapping"),
        (dict(weights=good, num_examples=0), r"num_examples must be an int >= 1, got 0"),
        (dict(weights=good, num_examples=-3), r"num_examples"),
        (dict(weights=good, num_examples=2.5), r"num_examples"),
        (dict(weights=good, num_examples=True), r"num_examples"),
        (dict(weights=good), r"num_examples.*None"),
        (dict(weights=good, num_examples=1, metrics={"bad name": 1.0}), r"metric name 'bad name'"),
        (dict(weights=good, num_examples=1, metrics={"": 1.0}), r"metric name ''"),
        (dict(weights=good, num_examples=1, metrics={"x" * 65: 1.0}), r"metric name 'x{65}'"),
        (dict(weights=good, num_examples=1, metrics={"loss": float("nan")}), r"metric 'loss' is nan"),
        (dict(weights=good, num_examples=1, metrics={"loss": np.inf}), r"metric 'loss' is inf"),
        (dict(weights=good, num_examples=1, metrics={"loss": "low"}), r"metric 'loss' must be a number"),
        (dict(weights=good, num_examples=1, metrics={"ok": True}), r"metric 'ok' must be a number"),
    ]
    with fedmesh.connect(node.endpoint, timeout=5) as site:
        for task in site.tasks():
            for kwargs, message in bad_replies:
                with pytest.raises(ValueError, match=message):
                    task.reply(**kwargs)
                assert not task.answered
            task.reply(weights=good, num_examples=np.int64(12), metrics={"x" * 64: 2})
            with pytest.raises(RuntimeError, match="already been answered"):
                task.reply(weights=good, num_examples=12)
            with pytest.raises(RuntimeError, match="already been answered"):
                task.fail("too late")
    header, tensors = node.join()
    assert header["task"] == 5 and header["num_examples"] == 12 and header["metrics"] == {"x" * 64: 2.0}
    for name, want in good.items():
        np.testing.assert_array_equal(tensors[name], want)


def test_fail(node: FakeNode) -> None:
    def script(n: FakeNode) -> Any:
        n.recv()
        n.send_task("fit", 7, example_weights())
        first = n.recv()
        n.send_task("evaluate", 8, {})
        second = n.recv()
        return first, second

    node.start(script)
    with fedmesh.connect(node.endpoint, timeout=5) as site:
        for task in site.tasks():
            if task.id == 7:
                task.fail("CUDA out of memory")
                with pytest.raises(RuntimeError, match="already been answered"):
                    task.reply(weights=dict(task.weights), num_examples=1)
            else:
                assert task.weights == {}
                task.fail("é" * 10000)
    (h1, p1), (h2, p2) = node.join()
    assert h1 == {"type": "error", "task": 7, "message": "CUDA out of memory"} and p1 == b""
    assert h2["type"] == "error" and h2["task"] == 8
    assert h2["message"] == "é" * 8189 + "..."


def test_unanswered_task_is_failed_when_the_loop_moves_on(node: FakeNode) -> None:
    def script(n: FakeNode) -> Any:
        n.recv()
        n.send_task("fit", 1, example_weights())
        n.send_task("evaluate", 2, example_weights())
        return n.recv(), n.recv()

    node.start(script)
    with fedmesh.connect(node.endpoint, timeout=5) as site:
        for task in site.tasks():
            if task.id == 2:
                task.reply(num_examples=3, metrics={"loss": 0.5})
    (h1, _), (h2, _) = node.join()
    assert h1 == {"type": "error", "task": 1, "message": "the trainer moved on without answering task 1"}
    assert h2["type"] == "result" and h2["task"] == 2 and h2["metrics"] == {"loss": 0.5}


def _frame(header: bytes, payload: bytes = b"", header_length: Any = None) -> bytes:
    n = len(header) if header_length is None else header_length
    return b"FMTR" + struct.pack("<IQ", n, len(payload)) + header + payload


_FIT_2x3 = json.dumps({"type": "fit", "task": 1, "tensors": [{"name": "w", "shape": [2, 3], "dtype": "float32"}]}).encode()


@pytest.mark.parametrize(
    "data, message",
    [
        (b"GARBAGE!" * 8, r"bad magic b'GARB'"),
        (b"FMTR" + struct.pack("<IQ", (1 << 20) + 1, 0), r"header length 1048577 outside 2\.\.1048576"),
        (b"FMTR" + struct.pack("<IQ", 1, 0) + b"x", r"header length 1 outside"),
        (_frame(b"[1, 2]"), r"JSON array, not an object"),
        (_frame(b"{nope"), r"not JSON"),
        (_frame(b'{"x": NaN}'), r"NaN"),
        (_frame(b'{"\xff": 1}'), r"not UTF-8"),
        (_frame(b'{"type": "dance", "task": 1}'), r"unknown message type 'dance'"),
        (_frame(b'{"task": 1}'), r"unknown message type None"),
        (_frame(_FIT_2x3, b"\0" * 8), r"announces a 8-byte payload; its 1 tensors take 24"),
        (_frame(_FIT_2x3, b"\0" * 24), None),  # a valid task: the control case
        (_frame(b'{"type": "shutdown"}', b"\0" * 4), r"shutdown message with a 4-byte payload"),
        (_frame(b'{"type": "fit", "tensors": []}'), r"no integer 'task' id"),
        (_frame(b'{"type": "fit", "task": 1, "lr": "fast", "tensors": []}'), r"'lr' is 'fast'"),
        (_frame(b'{"type": "fit", "task": 1, "tensors": {}}'), r"'tensors' is not a list"),
        (_frame(b'{"type": "fit", "task": 1, "tensors": [{"name": "w", "shape": [2], "dtype": "float64"}]}', b"\0" * 16), r"dtype 'float64'"),
        (_frame(b'{"type": "fit", "task": 1, "tensors": [{"name": "w", "shape": [-1], "dtype": "float32"}]}'), r"shape \[-1\]"),
        (_frame(b'{"type": "fit", "task": 1, "tensors": [{"name": "w", "shape": [], "dtype": "float32"},'
                b' {"name": "w", "shape": [], "dtype": "float32"}]}', b"\0" * 8), r"'w' is listed twice"),
    ],
)
def test_node_sending_garbage_is_a_protocol_error(node: FakeNode, data: bytes, message: Any) -> None:
    def script(n: FakeNode) -> None:
        n.recv()
        n.send_raw(data)
        if message is None:
            n.recv()  # the trainer's answer to the valid task
            n.send_shutdown()
        n.expect_eof()  # the trainer closes the connection

    node.start(script)
    site = fedmesh.connect(node.endpoint, timeout=5)
    if message is None:
        for task in site.tasks():
            task.reply(weights={"w": np.zeros((2, 3))}, num_examples=1)
    else:
        with pytest.raises(fedmesh.ProtocolError, match=message):
            for _ in site.tasks():
                pass
    assert site.closed
    node.join()


def test_node_closing_mid_frame_is_a_protocol_error(node: FakeNode) -> None:
    def script(n: FakeNode) -> None:
        n.recv()
        n.send_raw(_frame(_FIT_2x3, b"\0" * 24)[:-5])  # then the script ends: the node closes

    node.start(script)
    with fedmesh.connect(node.endpoint, timeout=5) as site:
        with pytest.raises(fedmesh.ProtocolError, match=r"middle of a message \(19 of 24 bytes\)"):
            list(site.tasks())
        assert site.closed
    node.join()


def test_tasks_end_on_shutdown(node: FakeNode) -> None:
    def script(n: FakeNode) -> None:
        n.recv()
        # One write, so it cannot race the trainer closing after the shutdown.
        n.send_raw(frame({"type": "shutdown"}) + task_frame("fit", 1, example_weights()))
        n.expect_eof()  # the task after the shutdown is never read

    node.start(script)
    site = fedmesh.connect(node.endpoint, timeout=5)
    assert list(site.tasks()) == []
    assert site.closed
    assert list(site.tasks()) == []  # still over
    node.join()


def test_tasks_end_on_eof(node: FakeNode) -> None:
    node.start(lambda n: n.recv())
    with fedmesh.connect(node.endpoint, timeout=5) as site:
        assert list(site.tasks()) == []
        assert site.closed
    node.join()
