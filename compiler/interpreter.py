"""The reference interpreter: runs the IR op by op with the registry's numpy kernels.

As KuiperInfer's RuntimeGraph: the execution order is computed once, and each
intermediate is released right after its last reader runs, so peak memory is the
live set, not the whole graph. Every run records its step stats (`m.last_step_stats`,
compiler/step_stats.py) and checks its RunControl before each node.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from compiler.model import CompiledModel, owned
from compiler.run_control import RunControl
from compiler.step_stats import output_stat
from ir.errors import NodeExecutionError
from ir.graph import Graph, Node, Value
from ir.topological_order import topological_order


class Interpreter(CompiledModel):
    backend = "interpreter"

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.order = topological_order(graph)
        self.release_after = _release_plan(graph, self.order)

    def _execute(self, arrays: list[np.ndarray], control: RunControl) -> list[np.ndarray]:
        env: dict[Value, np.ndarray] = dict(zip(self.graph.inputs, arrays))
        env.update((c, c.data) for c in self.graph.constants.values())
        stats = []
        thread = threading.current_thread().name
        for node, dead in zip(self.order, self.release_after):
            control.check(node.name)
            start = time.perf_counter()
            results = run_node(node, [env[v] for v in node.inputs])
            stats.append(output_stat(node.name, node.op, start, time.perf_counter(), thread, results))
            if control.on_node_output is not None:
                for r in results:
                    control.on_node_output(node.name, r)
            env.update(zip(node.outputs, results))
            for v in dead:
                del env[v]
        self.last_step_stats = stats
        return [owned(env[v]) for v in self.graph.outputs]


def run_node(node: Node, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Run one node's reference kernel and check what it returns against the IR types."""
    try:
        results = node.opdef.run(arrays, node.attrs)
    except Exception as exc:
        raise NodeExecutionError(f"node {node.name} ({node.op}) failed: {type(exc).__name__}: {exc}") from exc
    if len(results) != len(node.outputs):
        raise NodeExecutionError(
            f"node {node.name} ({node.op}) returned {len(results)} arrays, expected {len(node.outputs)}")
    for v, r in zip(node.outputs, results):
        if tuple(r.shape) != v.shape or r.dtype.name != v.dtype:
            raise NodeExecutionError(
                f"node {node.name} ({node.op}) produced {r.dtype.name}{list(r.shape)} for %{v.name}, "
                f"the IR says {v.type}")
    return results


def _release_plan(graph: Graph, order: list[Node]) -> list[list[Value]]:
    """For each step, the values whose last reader is that step (never graph outputs, inputs or constants)."""
    last: dict[Value, int] = {}
    for i, node in enumerate(order):
        for v in node.outputs:
            last[v] = i  # a value nobody reads dies right after it is made
        for v in node.inputs:
            if v.producer is not None:
                last[v] = i
    keep = set(graph.outputs)
    plan: list[list[Value]] = [[] for _ in order]
    for v, i in last.items():
        if v not in keep:
            plan[i].append(v)
    return plan
