"""compile(path, backend="executor"): the numba kernels node by node, independent nodes at once.

Every zoo model against torch (float64, tests/zoo_reference.py's check); two threads running nodes of one
run at once; a run cancelled, past its deadline, or with a failing node stops within the nodes in
flight, raises a typed error naming the node, and leaves the model usable.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
import tracemalloc

import numpy as np
import pytest

import compiler
from bench.pnnx_export import export_zoo
from codegen.emitter import is_view
from codegen.memory_plan import plan_memory
from compiler.api import optimize
from compiler.executor import CostModel, Executor
from compiler.interpreter import Interpreter
from compiler.step_stats import write_chrome_trace
from ir import parse_graph
from ir.errors import NodeExecutionError, RunCancelledError, RunTimeoutError
from tests.zoo_reference import ARCHITECTURES, MODELS, PATTERNS, check, reference


@pytest.fixture(scope="module")
def resnet50() -> Executor:
    return compiler.compile(export_zoo("resnet50"), backend="executor", threads=2)


@pytest.mark.parametrize("name", MODELS + ARCHITECTURES + PATTERNS)
def test_executor_matches_torch(name):
    model = compiler.compile(export_zoo(name), backend="executor", threads=2)
    assert model.backend == "executor"
    check(model(reference(name)[0][:1]), name, 1, f"{name} executor")
    assert len(model.last_step_stats) == len(model.graph.nodes)


def test_results_equal_the_numba_forward_bitwise():
    """The same kernels on the same arrays: the executor's outputs are the numba backend's, bit for bit."""
    param, x = export_zoo("inception_v3_mini"), reference("inception_v3_mini")[0][:1]
    np.testing.assert_array_equal(compiler.compile(param, backend="executor")(x), compiler.compile(param)(x))


def test_a_run_holds_about_the_live_set_not_every_intermediate(resnet50):
    """Each value is dropped after its last reader: a run's peak of numpy allocations stays near the
    largest set of values alive at once (the memory plan's bound), far below all of them together."""
    x = reference("resnet50")[0][:1]
    resnet50(x)
    plan = plan_memory(resnet50.graph, is_view)
    tracemalloc.start()
    try:
        resnet50(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert plan.peak_live_bytes <= peak < plan.total_bytes / 2


def _overlapping_threads(stats) -> bool:
    """Whether two nodes ran on different threads at overlapping times."""
    return any(a.thread != b.thread and a.start < b.end and b.start < a.end
               for k, a in enumerate(stats) for b in stats[k + 1:])


def _runs_two_threads_at_once(model, x) -> list:
    """The step stats of a run in which two threads ran nodes at once (a loaded machine may serialise
    one run, so up to 50 runs are looked at)."""
    for _ in range(50):
        model(x)
        stats = model.last_step_stats
        assert len(stats) == len(model.graph.nodes if model.graph is not None else stats)
        if _overlapping_threads(stats):
            return stats
    pytest.fail("no two threads ran nodes at once in 50 runs")


def test_inception_branches_run_on_two_threads_at_once(tmp_path):
    """inception_v3_mini at 299 x 299 (Inception-v3's size; its global pool takes any): with the default
    costs each block's larger branches are handed to the pool while the calling thread runs another,
    and the Chrome trace shows two threads busy at once. The result is the 299 x 299 numba forward's."""
    x = np.random.default_rng(0).standard_normal((1, 3, 299, 299)).astype(np.float32)
    param = export_zoo("inception_v3_mini")
    model = compiler.compile(param, backend="executor", threads=2).specialize({"in0": x.shape})
    assert sum(node.expensive for node in model.view.nodes) >= 2
    stats = _runs_two_threads_at_once(model, x)
    assert {s.thread for s in stats} - {threading.current_thread().name} <= {"executor-0", "executor-1"}
    np.testing.assert_array_equal(model(x), compiler.compile(param)(x))
    write_chrome_trace(stats, tmp_path / "trace.json")
    events = [e for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"] if e["ph"] == "X"]
    spans = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in events]
    assert any(a[0] != b[0] and a[1] < b[2] and b[1] < a[2] for a in spans for b in spans)


def test_every_node_handed_off_on_the_small_model_too():
    """At 64 x 64 the default costs hand nothing off (module docstring of compiler/executor.py); with
    every node that is ready with others handed off, the pool runs branches all the same."""
    graph = compiler.load_graph(export_zoo("inception_v3_mini"))
    model = Executor(optimize(graph), threads=2, costs=CostModel(hand_off_flops=0, hand_off_bytes=0))
    assert all(node.expensive for node in model.view.nodes)
    x = reference("inception_v3_mini")[0][:1]
    stats = _runs_two_threads_at_once(model, x)
    assert len({s.thread for s in stats}) >= 2
    check(model(x), "inception_v3_mini", 1, "inception_v3_mini executor, every node handed off")


def _stop_after(nodes: int, action) -> tuple[list[str], object]:
    """An on_node_output callback that calls action() once, after the outputs of `nodes` nodes, and the
    list of node names it saw."""
    seen: list[str] = []
    lock = threading.Lock()

    def callback(name: str, array: np.ndarray) -> None:
        with lock:
            seen.append(name)
            now = len(seen) == nodes
        if now:
            action()

    return seen, callback


def _check_stopped(model: Executor, error: RunCancelledError, least: int, most: int) -> None:
    """The run stopped at a node of the graph, having run at least `least` nodes, and at most the `most`
    before the stop and the nodes in flight then (one per thread: the pool's and the caller's)."""
    assert error.node in {n.name for n in model.graph.nodes}
    ran = len(model.last_step_stats)
    assert least <= ran <= most + model.threads + 1 < len(model.graph.nodes) // 4


def test_cancel_stops_a_run_within_the_nodes_in_flight(resnet50):
    x = reference("resnet50")[0][:1]
    expected = resnet50(x)
    started = threading.Event()
    holder = {}

    def cancel() -> None:
        started.wait()
        holder["future"].cancel()

    _, callback = _stop_after(5, cancel)
    holder["future"] = resnet50.run_async(None, {"in0": x}, on_node_output=callback)
    started.set()
    with pytest.raises(RunCancelledError, match="cancelled") as info:
        holder["future"].result(timeout=60)
    assert not isinstance(info.value, RunTimeoutError)
    _check_stopped(resnet50, info.value, 5, 5)
    np.testing.assert_array_equal(resnet50(x), expected)  # the next run works


def test_timeout_stops_a_run_within_the_nodes_in_flight(resnet50):
    x = reference("resnet50")[0][:1]
    expected = resnet50(x)
    _, callback = _stop_after(5, lambda: time.sleep(0.6))  # the deadline passes during node 5's callback
    with pytest.raises(RunTimeoutError, match="deadline") as info:
        resnet50.run(None, {"in0": x}, timeout=0.5, on_node_output=callback)
    _check_stopped(resnet50, info.value, 1, 5)  # on a slow machine the deadline may pass before node 5
    np.testing.assert_array_equal(resnet50.run(None, {"in0": x}, timeout=60)[0], expected)


def test_a_failing_node_raises_node_execution_error_naming_it():
    model = compiler.compile(export_zoo("resnet18"), backend="executor", threads=2)
    x = reference("resnet18")[0][:1]
    expected = model(x)
    index = len(model.view.nodes) // 2
    broken = model.view.nodes[index]
    failing = [True]

    def run(*arrays):
        if failing[0]:
            raise ValueError("the kernel met a bad value")
        return broken.run(*arrays)

    nodes = list(model.view.nodes)
    nodes[index] = dataclasses.replace(broken, run=run)
    model.view = dataclasses.replace(model.view, nodes=tuple(nodes))
    with pytest.raises(NodeExecutionError, match=re.escape(f"node {broken.node.name} ({broken.node.op}) failed: "
                                                           "ValueError: the kernel met a bad value")) as info:
        model(x)
    assert isinstance(info.value.__cause__, ValueError)
    assert len(model.last_step_stats) == index  # a chain: the nodes before it, and nothing after
    failing[0] = False
    np.testing.assert_array_equal(model(x), expected)


FLIPPED = """
    graph g(%x: f32[1,4,5,5]) {
      %a: f32[1,4,5,5] = relu(%x) @act
      %f: f32[1,4,5,5] = flip(%a) {dims=[3]} @mirror
      %b: f32[1,4,5,5] = add(%f, %a) @sum
      return %b
    }"""


def test_a_node_without_a_kernel_runs_its_reference():
    """flip has no kernel: the executor runs its numpy reference (a view, made contiguous for the add's
    kernel after it), names it in `interpreted` and marks it in the IR."""
    graph = parse_graph(FLIPPED)
    model = Executor(graph)
    assert model.interpreted == {"mirror": "no numba kernel"}
    assert "@mirror  # interpreted: no numba kernel" in model.ir
    x = np.random.default_rng(0).standard_normal((1, 4, 5, 5)).astype(np.float32)
    np.testing.assert_array_equal(model(x), Interpreter(graph)(x))
