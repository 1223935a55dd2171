"""Differential testing on random valid IR graphs (tests/random_graphs.py): the numba backend and the
interpreter in float32 against the interpreter in float64, 200 graphs of up to 8 nodes from a fixed
seed. The long run is `python -m tests.random_graphs --graphs 5000`."""

from __future__ import annotations

import random

from tests.random_graphs import random_graph, run


def test_two_hundred_random_graphs_agree_with_float64():
    assert run(200, seed=20261126) == 200


def test_the_generator_makes_varied_valid_graphs():
    ops = set()
    for seed in range(200):
        graph = random_graph(random.Random(seed))
        assert graph.nodes and graph.outputs
        ops.update(n.op for n in graph.nodes)
    assert {"conv2d", "max_pool2d", "avg_pool2d", "concat", "split", "slice", "transpose", "reshape", "linear",
            "matmul", "batch_norm", "layer_norm", "softmax", "reduce_mean", "resize", "pad"} <= ops
