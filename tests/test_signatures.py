"""Signatures at run time (compiler/signatures.py): other input shapes, fetches of any value, feeds of
intermediate values, and pnnx's dynamic dims; each signature compiled once, in memory and (numba) on disk.

References are torch's: the zoo's float64 evaluation (tests/zoo_reference.py's check) for whole models,
torch eager on the same module for the small ones here.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch import nn

import compiler
from bench import zoo
from bench.pnnx_export import export_zoo
from compiler import InputError
from tests.numerics import check_float32, float64_with_error_scale
from tests.optest import export
from tests.zoo_reference import check, reference

BACKENDS = ("numba", "interpreter", "executor")


class Branches(nn.Module):
    """Two inputs; a = relu(conv(x)) feeds both outputs, only out0 reads y."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.act = nn.ReLU()

    def forward(self, x, y):
        a = self.act(self.conv(x))
        return a * y, torch.sigmoid(a)


class FlattenLinear(nn.Module):
    """A classifier whose Linear fixes the image size: flatten without a global pool."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(torch.relu(self.conv(x)), 1))


class GlobalPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1)
        return self.fc(torch.flatten(y, 1))


def _branches():
    torch.manual_seed(0)
    module = Branches().eval()
    x, y = torch.randn(2, 3, 7, 9), torch.randn(2, 4, 7, 9)
    with torch.no_grad():
        a = module.act(module.conv(x))
    return module, export(module, x, y), x.numpy(), y.numpy(), a.numpy()


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_1_then_3_then_1_on_the_zoo(backend):
    """A call with another batch runs a model compiled once for it; the first signature keeps working."""
    name = "resnet18"
    x = reference(name)[0]
    m = compiler.compile(export_zoo(name), backend=backend)
    first = m(x[:1])
    check(first, name, 1, f"{name} {backend} batch 1")
    check(m(x[:3]), name, 3, f"{name} {backend} batch 3")
    again = m(x[:3])
    check(again, name, 3, f"{name} {backend} batch 3 again")
    np.testing.assert_array_equal(m(x[:1]), first)
    assert len(m.signatures) == 1  # batch 3, built once
    assert m.specialize({"in0": (3, 3, 224, 224)}).inputs[0].shape == (3, 3, 224, 224)
    assert len(m.signatures) == 1


@pytest.mark.parametrize("backend", ["numba", "interpreter"])
def test_224_to_320_on_a_fully_convolutional_model(backend):
    """ResNet-18 ends in a global pool: at 320 x 320 it computes what torch computes at that size."""
    name = "resnet18"
    x = zoo.make_input(zoo.get(name), batch=1, seed=3)
    x320 = np.random.default_rng(3).standard_normal((1, 3, 320, 320)).astype(np.float32)
    torch.manual_seed(0)
    exact, sigma = float64_with_error_scale(zoo.get(name).build(), x320)
    m = compiler.compile(export_zoo(name), backend=backend)
    m(x)
    check_float32([m(x320)], exact, sigma, f"{name} {backend} 320x320")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_shape_the_graph_cannot_take_names_the_node_and_why(backend):
    torch.manual_seed(0)
    module = FlattenLinear().eval()
    m = compiler.compile(export(module, torch.randn(1, 3, 8, 8)), backend=backend)
    with pytest.raises(InputError, match=r"in0 \(1, 3, 9, 8\).*nn.Linear fc: .*input features 288 do not match"):
        m(np.zeros((1, 3, 9, 8), np.float32))
    with pytest.raises(InputError, match=r"input in0: expected shape \(1, 3, 8, 8\) float32, got shape \(3, 8, 8\)"):
        m(np.zeros((3, 8, 8), np.float32))  # another rank: no specialization is tried
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        _close(m(x), module(torch.from_numpy(x)).numpy())  # batch 2 is fine: flatten keeps the batch


@pytest.mark.parametrize("backend", BACKENDS)
def test_fetch_an_intermediate_value_with_an_output(backend):
    module, param, x, y, a = _branches()
    m = compiler.compile(param, backend=backend)
    relu = m.run(["act"], {"in0": x, "in1": y})  # a node's name fetches its output
    _close(relu[0], a)
    got_a, out0, again = m.run(["act", "out0", "act"], {"in0": x, "in1": y})
    _close(got_a, a)
    _close(out0, a * y)
    np.testing.assert_array_equal(again, got_a)
    with torch.no_grad():
        _close(m.run(["out1"], {"in0": x, "in1": y})[0], torch.sigmoid(torch.from_numpy(a)).numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_feeding_an_intermediate_cuts_the_graph_and_drops_inputs_not_needed(backend):
    module, param, x, y, a = _branches()
    m = compiler.compile(param, backend=backend)
    fed = np.random.default_rng(1).standard_normal(a.shape).astype(np.float32)
    out0, = m.run(["out0"], {"act": fed, "in1": y})  # in0 is not needed: act is fed
    _close(out0, fed * y)
    out1, = m.run(["out1"], {"act": fed})  # neither input is needed
    _close(out1, 1 / (1 + np.exp(-fed)))
    with pytest.raises(InputError, match=r"needs input\(s\) in1, which the feeds \(act\) do not give"):
        m.run(["out0"], {"act": fed})
    with pytest.raises(InputError, match=r"feed act: expected shape \(2, 4, 7, 9\) float32, got shape \(2, 4, 7, 8\)"):
        m.run(["out1"], {"act": fed[..., :8]})


@pytest.mark.parametrize("backend", ["numba", "interpreter"])
def test_bad_fetches_and_feeds_are_input_errors(backend):
    _, param, x, y, _ = _branches()
    m = compiler.compile(param, backend=backend)
    with pytest.raises(InputError, match=r"no value or node named 'akt'.*did you mean act"):
        m.run(["akt"], {"in0": x, "in1": y})
    with pytest.raises(InputError, match=r"cannot feed 'nope'"):
        m.run(["out0"], {"nope": x, "in1": y})
    with pytest.raises(InputError, match=r"cannot feed 'conv.weight'.*a constant"):
        m.run(["out0"], {"conv.weight": x, "in0": x, "in1": y})


def test_a_new_signature_is_built_once_when_threads_ask_at_once():
    _, param, x, y, a = _branches()
    m = compiler.compile(param, backend="interpreter")
    builds = []
    build = m.signatures._build
    m.signatures._build = lambda signature: builds.append(signature) or build(signature)
    results = [None] * 4

    def call(i):
        results[i] = m.run(["act"], {"in0": x, "in1": y})[0]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1
    for r in results:
        _close(r, a)


def test_numba_specializations_are_kept_in_the_aot_cache(tmp_path):
    _, param, x, y, a = _branches()
    x3, y3 = np.concatenate([x, x[:1]]), np.concatenate([y, y[:1]])
    first = compiler.compile(param, cache_dir=tmp_path)
    out0, out1 = first(x3, y3)
    assert first.specialize({"in0": x3.shape, "in1": y3.shape}).cache_info.hit is False
    second = compiler.compile(param, cache_dir=tmp_path)
    assert second.cache_info.hit
    specialized = second.specialize({"in0": x3.shape, "in1": y3.shape})
    assert specialized.cache_info.hit
    np.testing.assert_array_equal(second(x3, y3)[0], out0)
    fetched = second.run(["act"], {"in0": x, "in1": y})
    _close(fetched[0], a)
    again = compiler.compile(param, cache_dir=tmp_path)
    again.run(["act"], {"in0": x, "in1": y})
    assert again.signatures.get(next(iter(again.signatures._models))).cache_info.hit


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_dims_need_no_input_shapes(backend):
    """pnnx marks the dims that differ between two example inputs '?': such a model compiles without
    input_shapes, shows its dynamic dims, and each call runs the model of its shape."""
    torch.manual_seed(0)
    module = GlobalPool().eval()
    param = export(module, torch.randn(1, 3, 16, 16), other_sizes=[torch.randn(2, 3, 24, 20)])
    m = compiler.compile(param, backend=backend)
    assert [s.shape for s in m.inputs] == [(None, 3, None, None)]
    assert [s.shape for s in m.outputs] == [(None, 5)]
    for shape in [(2, 3, 16, 16), (1, 3, 9, 7), (2, 3, 16, 16)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        with torch.no_grad():
            want = module(torch.from_numpy(x)).numpy()
        _close(m(x), want)
    assert len(m.signatures) == 2
    with pytest.raises(InputError, match=r"input channels 4 do not match weight"):
        m(np.zeros((1, 4, 8, 8), np.float32))
    with pytest.raises(InputError, match="dynamic input dims"):
        print(m.ir)
    assert m.specialize({"in0": (1, 3, 5, 5)}).inputs[0].shape == (1, 3, 5, 5)
