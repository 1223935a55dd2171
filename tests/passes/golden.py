"""Before/after IR text checks for passes (filecheck style, but exact)."""

from __future__ import annotations

import textwrap

import numpy as np

from ir import parse_graph, print_graph, verify


def run_pass(pass_fn, before: str, weights: dict[str, np.ndarray] | None = None):
    graph = parse_graph(textwrap.dedent(before), weights)
    verify(graph)
    after = pass_fn(graph)
    verify(after)
    unchanged = print_graph(parse_graph(textwrap.dedent(before), weights))
    assert print_graph(graph) == unchanged, "the pass mutated its input"
    return after


def assert_ir(graph, expected: str) -> None:
    assert print_graph(graph).strip() == textwrap.dedent(expected).strip()
