"""Differential testing on random valid IR graphs (tests/random_graphs.py): the numba backend and the
interpreter in float32 against the interpreter in float64, a fixed-seed 200 graphs of up to 8 nodes. The
long run is `python -m tests.random_graphs --graphs 5000`."""

from __future__ import annotations

import pytest

from tests.random_graphs import check_graph, random_graph


@pytest.mark.parametrize("block", range(4))
def test_random_graphs_agree_with_float64(block, tmp_path):
    for seed in range(block * 50, (block + 1) * 50):
        check_graph(seed, tmp_path)


def test_the_generator_makes_varied_valid_graphs():
    ops = set()
    for seed in range(200):
        graph = random_graph(seed)
        assert graph.nodes and graph.outputs
        ops.update(n.op for n in graph.nodes)
    assert {"conv2d", "max_pool2d", "avg_pool2d", "concat", "split", "slice", "transpose", "reshape", "linear",
            "matmul", "batch_norm", "layer_norm", "softmax", "reduce_mean", "resize", "pad"} <= ops
