"""fedmesh.torch: state_dict <-> protocol weights, and a module trained over the wire."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import fedmesh  # noqa: E402
import fedmesh.torch as fmt  # noqa: E402
from fakenode import FakeNode  # noqa: E402


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(2 * 4 * 4, 3)

    def forward(self, x: Any) -> Any:
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


FLOATING = ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "fc.weight", "fc.bias"]


def trained_net(seed: int) -> Net:
    torch.manual_seed(seed)
    net = Net()
    net.train()
    net(torch.randn(8, 1, 6, 6))  # moves BatchNorm's running statistics
    return net


def test_from_module() -> None:
    net = trained_net(0)
    w = fmt.from_module(net)
    assert list(w) == FLOATING  # state_dict order, without bn.num_batches_tracked
    for name, t in net.state_dict().items():
        if name in w:
            assert w[name].dtype == np.float32 and w[name].shape == tuple(t.shape)
            np.testing.assert_array_equal(w[name], t.numpy())
    assert w["bn.running_var"].min() > 0 and abs(w["bn.running_mean"]).sum() > 0
    before = w["fc.bias"].copy()
    with torch.no_grad():
        net.fc.bias.add_(1.0)
    np.testing.assert_array_equal(w["fc.bias"], before)  # a copy, not a view of the parameter


def test_load_round_trip() -> None:
    src, dst = trained_net(0), trained_net(1)
    w = fmt.from_module(src)
    for a in w.values():
        a.flags.writeable = False  # like a task's weights
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fmt.load(dst, w)
    src_state, dst_state = src.state_dict(), dst.state_dict()
    for name in FLOATING:
        torch.testing.assert_close(dst_state[name], src_state[name], rtol=0, atol=0)
    assert int(dst_state["bn.num_batches_tracked"]) == 1  # integer buffer left alone
    assert dst.fc.weight.requires_grad  # still a parameter
    x = torch.randn(4, 1, 6, 6)
    src.eval(), dst.eval()
    torch.testing.assert_close(dst(x), src(x), rtol=0, atol=0)


def test_to_state_dict() -> None:
    w = {"a": np.arange(4, dtype=np.float32).reshape(2, 2), "b": np.array(2.5)}
    w["a"].flags.writeable = False
    sd = fmt.to_state_dict(w)
    assert sd["a"].dtype == torch.float32 and sd["b"].dtype == torch.float32
    assert sd["a"].tolist() == [[0.0, 1.0], [2.0, 3.0]] and sd["b"].item() == 2.5
    sd["a"][0, 0] = 9  # a writable copy
    assert w["a"][0, 0] == 0


def test_load_mismatch() -> None:
    net = trained_net(0)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    w = fmt.from_module(trained_net(1))
    w_missing = {k: v for k, v in w.items() if k not in ("bn.running_var", "fc.bias")}
    w_missing["head.weight"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match=r"2 missing \(first 'bn.running_var'\), 1 unexpected \(first 'head.weight'\)"):
        fmt.load(net, w_missing)
    with pytest.raises(ValueError, match=r"1 unexpected \(first 'bn.num_batches_tracked'\)"):
        fmt.load(net, dict(w, **{"bn.num_batches_tracked": np.zeros(())}))
    w_shape = dict(w, **{"fc.weight": np.zeros((32, 3), np.float32)})
    with pytest.raises(ValueError, match=r"'fc.weight' has shape \[32, 3\]; Net expects \[3, 32\]"):
        fmt.load(net, w_shape)
    for k, v in net.state_dict().items():  # nothing was loaded
        assert torch.equal(v, before[k]), k


def test_module_trained_over_the_wire(node: FakeNode) -> None:
    global_model = fmt.from_module(trained_net(0))

    def script(n: FakeNode) -> Any:
        n.recv()
        n.send_task("fit", 11, global_model)
        got = n.recv_tensors()
        n.send_shutdown()
        return got

    node.start(script)
    net = trained_net(5)
    with fedmesh.connect(node.endpoint, timeout=5, num_examples=8, name="pytorch") as site:
        for task in site.tasks():
            fmt.load(net, task.weights)
            with torch.no_grad():  # "training": double every floating entry
                for name, t in net.state_dict().items():
                    if t.is_floating_point():
                        t.mul_(2)
            task.reply(weights=fmt.from_module(net), num_examples=8, metrics={"loss": 0.125})
    header, tensors = node.join()
    assert header["task"] == 11 and header["metrics"] == {"loss": 0.125}
    assert [t["name"] for t in header["tensors"]] == FLOATING
    for name in FLOATING:
        np.testing.assert_array_equal(tensors[name], global_model[name] * 2)
