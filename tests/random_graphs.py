"""Random valid IR graphs, and the differential check: the numba backend and the interpreter, both in
float32, against the interpreter on the same graph in float64.

    python -m tests.random_graphs --graphs 5000 [--seed 1]     # the long run; prints counts

Hypothesis draws the graphs (its random choices, and the node count), so a failing graph is shrunk to
a simplest one before it is reported; tests/test_random_graphs.py runs a fixed-seed few hundred.

A graph grows from one or two inputs by ops chosen at random among those the values so far can feed
(convolutions of any kernel, stride, padding, dilation and groups, pools, elementwise chains with
broadcasting, concat and split, reshape and transpose, matmul and linear, batch and layer norms,
softmax, reductions, resize, pad), with random sizes; the shape rules decide what is valid (a node they
refuse is simply not added). Values are kept near unit scale (weights ~ 1/sqrt(fan-in)), so float32
stays close to float64 and the check can be tight: each output within 64 float32 epsilons per op on its
path, relative to its magnitude.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compiler.api import optimize
from compiler.interpreter import Interpreter
from ir.graph import Graph, Node, Value, make_node
from ir.types import TensorType
from ir.verifier import verify

UNARY = ["relu", "sigmoid", "tanh", "silu", "hardswish", "neg", "abs"]
BINARY = ["add", "sub", "mul", "maximum"]


@dataclass
class _Builder:
    rng: random.Random
    nodes: list[Node]
    constants: list[Value]
    values: list[Value]  # every value an op may read (inputs and node outputs)
    names: int = 0

    def fresh(self, prefix: str) -> str:
        self.names += 1
        return f"{prefix}{self.names}"

    def const(self, shape: tuple[int, ...], scale: float = 1.0, positive: bool = False) -> Value:
        data = np.asarray(self.rng_np.standard_normal(shape) * scale, np.float64)
        if positive:
            data = np.abs(data) + 0.5
        data.flags.writeable = False
        value = Value(self.fresh("w"), TensorType.of(data), data)
        self.constants.append(value)
        return value

    @property
    def rng_np(self) -> np.random.Generator:
        return np.random.default_rng(self.rng.randrange(1 << 30))

    def add(self, op: str, inputs: list[Value], attrs: dict | None = None, outputs: int = 1) -> list[Value] | None:
        """The node's outputs, or None where its shape rule refuses these inputs and attributes."""
        try:
            node = make_node(op, self.fresh("n"), inputs, [self.fresh("v") for _ in range(outputs)], attrs)
        except (ValueError, IndexError, TypeError, ArithmeticError):
            return None
        if any(v.type.size == 0 or v.type.size > 1 << 18 for v in node.outputs):
            return None  # empty, or too large for a quick check
        self.nodes.append(node)
        self.values.extend(node.outputs)
        return node.outputs

    def pick(self, rank: int | None = None, at_least: int = 1) -> Value | None:
        candidates = [v for v in self.values if (rank is None or v.type.rank == rank) and v.type.rank >= at_least]
        return self.rng.choice(candidates) if candidates else None


def _conv(b: _Builder) -> None:
    x = b.pick(rank=4)
    if x is None:
        return
    c = x.shape[1]
    kh, kw = b.rng.choice([(1, 1), (3, 3), (5, 5), (1, 3), (3, 1), (2, 2)])
    groups = b.rng.choice([1, 1, 1, c] + [g for g in (2, 4) if c % g == 0])
    out = c if groups == c and b.rng.random() < 0.7 else groups * b.rng.randint(1, max(1, 16 // groups))
    weight = b.const((out, c // groups, kh, kw), 1 / math.sqrt(c // groups * kh * kw))
    bias = b.const((out,), 0.1) if b.rng.random() < 0.7 else None
    attrs = {"stride": (b.rng.choice([1, 1, 2]),) * 2, "dilation": (b.rng.choice([1, 1, 2]),) * 2,
             "padding": tuple(b.rng.randint(0, max(kh, kw) // 2 + 1) for _ in range(4)), "groups": groups}
    b.add("conv2d", [x, weight] + ([bias] if bias is not None else []), attrs)


def _pool(b: _Builder) -> None:
    x = b.pick(rank=4)
    if x is None:
        return
    k = b.rng.choice([2, 3])
    attrs = {"kernel": (k, k), "stride": (b.rng.choice([1, 2]),) * 2, "padding": (k // 2 * b.rng.randint(0, 1),) * 4,
             "ceil_mode": b.rng.random() < 0.3}
    if b.rng.random() < 0.5:
        b.add("max_pool2d", [x], attrs)
    else:
        b.add("avg_pool2d", [x], {**attrs, "count_include_pad": b.rng.random() < 0.5})


def _global_pool(b: _Builder) -> None:
    x = b.pick(rank=4)
    if x is not None:
        b.add("adaptive_avg_pool2d", [x], {"output_size": (1, 1)})


def _unary(b: _Builder) -> None:
    x = b.pick()
    if x is not None:
        b.add(b.rng.choice(UNARY), [x])


def _binary(b: _Builder) -> None:
    x = b.pick()
    if x is None:
        return
    same = [v for v in b.values if v.shape == x.shape and v is not x]
    roll = b.rng.random()
    if same and roll < 0.5:
        other = b.rng.choice(same)
    elif x.type.rank == 4 and roll < 0.8:
        other = b.const((1, x.shape[1], 1, 1))  # per channel
    else:
        other = b.const(x.shape[-1:])  # along the last axis
    pair = [x, other] if b.rng.random() < 0.5 else [other, x]
    b.add(b.rng.choice(BINARY), pair)


def _concat(b: _Builder) -> None:
    x = b.pick(at_least=1)
    if x is None:
        return
    axis = b.rng.randrange(x.type.rank)
    partners = [v for v in b.values if v.type.rank == x.type.rank and v is not x
                and all(d1 == d2 for i, (d1, d2) in enumerate(zip(v.shape, x.shape)) if i != axis)]
    parts = [x] + b.rng.sample(partners, min(len(partners), b.rng.randint(1, 2))) if partners else [x, x]
    b.add("concat", parts, {"dim": axis})


def _slice(b: _Builder) -> None:
    x = b.pick()
    if x is None:
        return
    axis = b.rng.randrange(x.type.rank)
    n = x.shape[axis]
    start = b.rng.randrange(n)
    b.add("slice", [x], {"axes": (axis,), "starts": (start,), "ends": (b.rng.randint(start + 1, n),),
                         "steps": (b.rng.choice([1, 1, 2]),)})


def _split(b: _Builder) -> None:
    x = b.pick()
    if x is None:
        return
    axis = b.rng.randrange(x.type.rank)
    n = x.shape[axis]
    if n < 2:
        return
    first = b.rng.randint(1, n - 1)
    b.add("split", [x], {"dim": axis, "sizes": (first, n - first)}, outputs=2)


def _reshape(b: _Builder) -> None:
    x = b.pick(at_least=2)
    if x is None:
        return
    if b.rng.random() < 0.5:
        b.add("reshape", [x], {"shape": (x.shape[0], x.type.size // x.shape[0])})
    else:
        perm = list(range(x.type.rank))
        b.rng.shuffle(perm)
        b.add("transpose", [x], {"perm": tuple(perm)})


def _matmul(b: _Builder) -> None:
    x = b.pick(at_least=2)
    if x is None or x.type.rank > 4:
        return
    k = x.shape[-1]
    if b.rng.random() < 0.5:
        out = b.rng.randint(1, 24)
        bias = [b.const((out,), 0.1)] if b.rng.random() < 0.5 else []
        b.add("linear", [x, b.const((out, k), 1 / math.sqrt(k)), *bias])
    else:
        b.add("matmul", [x, b.const((k, b.rng.randint(1, 24)), 1 / math.sqrt(k))])


def _norm(b: _Builder) -> None:
    x = b.pick(at_least=2)
    if x is None:
        return
    if x.type.rank == 4 and b.rng.random() < 0.5:
        c = x.shape[1]
        b.add("batch_norm", [x, b.const((c,), 0.1), b.const((c,), positive=True), b.const((c,)), b.const((c,), 0.1)],
              {"eps": 1e-5})
    else:
        d = x.shape[-1]
        b.add("layer_norm", [x, b.const((d,)), b.const((d,), 0.1)], {"normalized_shape": (d,), "eps": 1e-5})


def _softmax(b: _Builder) -> None:
    x = b.pick()
    if x is not None:
        b.add("softmax", [x], {"dim": b.rng.randrange(x.type.rank)})


def _reduce(b: _Builder) -> None:
    x = b.pick(at_least=2)
    if x is not None:
        b.add("reduce_mean", [x], {"dims": (b.rng.randrange(x.type.rank),), "keepdim": b.rng.random() < 0.5})


def _resize(b: _Builder) -> None:
    x = b.pick(rank=4)
    if x is None:
        return
    size = (x.shape[2] * b.rng.choice([1, 2]) + b.rng.randint(-1, 1), x.shape[3] * 2)
    b.add("resize", [x], {"size": size, "mode": b.rng.choice(["nearest", "bilinear"]),
                          "align_corners": b.rng.random() < 0.3})


def _pad(b: _Builder) -> None:
    x = b.pick(rank=4)
    if x is not None:
        b.add("pad", [x], {"pads": tuple(b.rng.randint(0, 2) for _ in range(4)),
                           "mode": b.rng.choice(["constant", "reflect", "replicate"])})


OPS: list[Callable[[_Builder], None]] = [_conv, _conv, _conv, _pool, _global_pool, _unary, _unary, _binary, _binary,
                                         _concat, _slice, _split, _reshape, _matmul, _norm, _softmax, _reduce,
                                         _resize, _pad]


def random_graph(rng: random.Random, nodes: int = 8, name: str = "random") -> Graph:
    """A valid float64 graph of up to `nodes` nodes from one or two image-like inputs, by rng's choices."""
    b = _Builder(rng, [], [], [])
    inputs = []
    for i in range(rng.choice([1, 1, 2])):
        shape = (rng.randint(1, 2), rng.randint(1, 12), rng.randint(1, 14), rng.randint(1, 14))
        inputs.append(Value(f"in{i}", TensorType(shape, "float64")))
    b.values.extend(inputs)
    for _ in range(nodes * 4):
        if len(b.nodes) >= nodes:
            break
        rng.choice(OPS)(b)
    produced = [v for n in b.nodes for v in n.outputs]
    read = {v for n in b.nodes for v in n.inputs}
    outputs = [v for v in produced if v not in read] or produced[-1:] or inputs[:1]
    if not b.nodes:
        node = make_node("relu", "n0", inputs[:1], ["v0"])
        b.nodes.append(node)
        outputs = node.outputs
    graph = Graph(name, inputs, outputs[:3], b.nodes, b.constants)
    verify(graph)
    return graph


def as_float32(graph: Graph) -> Graph:
    """The same graph in float32: inputs, constants and every value."""
    g = graph.copy()
    for v in g.values():
        v.type = TensorType(v.shape, "float32")
        if v.data is not None:
            data = v.data.astype(np.float32)
            data.flags.writeable = False
            v.data = data
    return g


def _depth(graph: Graph) -> dict[Value, int]:
    depth = {v: 0 for v in graph.inputs}
    for n in graph.nodes:
        d = 1 + max((depth.get(v, 0) for v in n.inputs), default=0)
        for v in n.outputs:
            depth[v] = d
    return depth


def check_graph(graph64: Graph, module_dir: Path, seed: int = 0) -> None:
    """Run a float64 graph on the interpreter, and its float32 copy on the interpreter and the numba
    backend; raise AssertionError naming the graph when a float32 result strays from float64."""
    from compiler.numba_backend import NumbaModel

    graph32 = as_float32(graph64)
    rng = np.random.default_rng(seed)
    x64 = [rng.standard_normal(v.shape) for v in graph64.inputs]
    x32 = [x.astype(np.float32) for x in x64]
    exact = _as_list(Interpreter(optimize(graph64, fuse=False))(*x64))
    depth = _depth(graph64)
    runs = {"interpreter": Interpreter(optimize(graph32, fuse=False)),
            "numba": NumbaModel.build(optimize(graph32), module_dir)}
    for name, model in runs.items():
        got = _as_list(model(*x32))
        for i, (g, e, v) in enumerate(zip(got, exact, graph64.outputs)):
            tolerance = 64 * np.finfo(np.float32).eps * (1 + depth.get(v, 1)) * max(1.0, float(np.max(np.abs(e))))
            worst = float(np.max(np.abs(g.astype(np.float64) - e), initial=0.0))
            assert g.shape == e.shape and worst <= tolerance, (
                f"{graph64.name}, output {i} ({v.name}) on {name}: off by {worst:.3g} > {tolerance:.3g}\n"
                f"{graph32}")


def run(graphs: int, seed: int, max_nodes: int = 8, report_every: int = 0) -> int:
    """Check `graphs` random graphs drawn by hypothesis from `seed`; a failing graph is shrunk (fewer nodes,
    smaller sizes, earlier choices) before it is raised. Returns the number checked."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    checked = [0]
    with tempfile.TemporaryDirectory(prefix="pnnx_jit_random_") as scratch:
        @hypothesis_seed(seed)
        @settings(max_examples=graphs, deadline=None, database=None, phases=[Phase.generate, Phase.shrink],
                  suppress_health_check=list(HealthCheck), print_blob=False)
        @given(rng=st.randoms(use_true_random=False), nodes=st.integers(1, max_nodes))
        def graphs_agree(rng: random.Random, nodes: int) -> None:
            check_graph(random_graph(rng, nodes), Path(scratch))
            checked[0] += 1
            if report_every and checked[0] % report_every == 0:
                print(f"{checked[0]} graphs checked", flush=True)

        graphs_agree()
    return checked[0]


def _as_list(outputs) -> list[np.ndarray]:
    return list(outputs) if isinstance(outputs, tuple) else [outputs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.random_graphs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=8, help="at most this many nodes a graph")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    checked = run(args.graphs, args.seed, args.nodes, report_every=100)
    print(f"{checked} random graphs (seed {args.seed}) agree on both backends in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
