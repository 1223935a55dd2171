"""Every zoo model, exported by pnnx: the IR round-trips and the interpreter matches torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compiler
from bench import zoo
from bench.pnnx_export import export_zoo
from ir import parse_graph, print_graph, verify

MODELS = ["tiny_cnn", "mlp", "transformer_block", "unet_small", "mobilenet_v2", "resnet18", "resnet50", "yolov5s"]


def reference(name: str, x: np.ndarray) -> list[np.ndarray]:
    module = zoo.get(name).build()
    with torch.no_grad():
        out = module(torch.from_numpy(x))
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.numpy() for o in outs]


def assert_matches_torch(got, expected, label: str) -> None:
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape, label
        # about 1e-4 relative to the output's scale (resnet50's logits are ~60)
        scale = max(1.0, float(np.abs(e).max()))
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4 * scale, err_msg=label)


@pytest.mark.parametrize("name", MODELS)
def test_ir_round_trips(name):
    graph = compiler.load_graph(export_zoo(name))
    text = print_graph(graph)
    again = parse_graph(text, graph.weights())
    verify(again)
    assert print_graph(again) == text


@pytest.mark.parametrize("name", MODELS)
def test_interpreter_matches_torch(name):
    x = zoo.make_input(zoo.get(name), batch=1, seed=1)
    model = compiler.compile(export_zoo(name), backend="interpreter")
    assert_matches_torch(model(x), reference(name, x), f"{name} interpreter")
