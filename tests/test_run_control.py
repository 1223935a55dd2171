"""Deadlines and cancellation on the numba backend and the interpreter (the executor's are in
tests/test_executor.py): a run stops before a node mid-way, raises the typed error naming it, and the
model runs the next call as before. The numba forward polls its stop flags before each node
(codegen/kernels/control.py); the interpreter checks its RunControl."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

import compiler
from bench.pnnx_export import export_zoo
from compiler import RunCancelledError, RunTimeoutError
from compiler.run_control import RunControl
from tests.zoo_reference import reference


@pytest.fixture(scope="module", params=["numba", "interpreter"])
def model(request):
    return compiler.compile(export_zoo("resnet50"), backend=request.param, threads=2)


def _run_time(model, x) -> tuple[np.ndarray, float]:
    """The output of a run, and the fastest of three runs' seconds: one run slowed by the other test
    worker's compile made a deadline of a quarter of it longer than a whole run, which then finished."""
    expected = model(x)
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        model(x)
        seconds.append(time.perf_counter() - start)
    return expected, min(seconds)


def _stopped_mid_run(model, error: RunCancelledError) -> None:
    names = [n.name for n in model.graph.nodes]
    assert error.node in names[1:], error.node  # not before the run: between two of its nodes


def test_a_deadline_stops_the_run_between_nodes(model):
    """A deadline of a quarter of a run stops it mid-way. The runs that set "a run" may all have been
    slowed by the other test worker (BLAS threads of the interpreter fighting its compile) and the
    deadline's run not: a run that finished within its deadline gives the right output and the next try
    halves the deadline; a deadline that never stops a run fails."""
    x = reference("resnet50")[0][:1]
    expected, seconds = _run_time(model, x)
    timeout = seconds / 4
    for _ in range(4):
        try:
            outputs = model.run(None, {"in0": x}, timeout=timeout)
        except RunTimeoutError as error:
            assert re.search(r"deadline of .* s; stopped before node", str(error)), str(error)
            _stopped_mid_run(model, error)
            break
        np.testing.assert_array_equal(outputs[0], expected)
        timeout /= 2
    else:
        pytest.fail(f"no deadline down to {timeout * 2:.2g} s stopped a run of about {seconds:.2g} s")
    np.testing.assert_array_equal(model.run(None, {"in0": x}, timeout=60)[0], expected)


def test_cancel_stops_a_running_run(model):
    """cancel() at a moment the run is under way: when that moment is depends on the machine's load, so
    the delay adapts (shorter when the run finished first, longer when it had not started) over tries."""
    x = reference("resnet50")[0][:1]
    expected, seconds = _run_time(model, x)
    delay = seconds / 4
    for _ in range(20):
        future = model.run_async(None, {"in0": x})
        while not future.running():
            time.sleep(1e-4)
        time.sleep(delay)
        if not future.cancel():  # done already
            np.testing.assert_array_equal(future.result()[0], expected)
            delay /= 2
            continue
        with pytest.raises(RunCancelledError, match="cancelled; stopped") as info:
            future.result(timeout=60)
        assert not isinstance(info.value, RunTimeoutError)
        if info.value.node in (None, model.graph.nodes[0].name):  # before it started
            delay *= 1.5
            continue
        _stopped_mid_run(model, info.value)
        break
    else:
        pytest.fail("no cancel() landed while the run was under way in 20 tries")
    np.testing.assert_array_equal(model(x), expected)


def test_a_run_cancelled_before_it_starts_never_runs(model):
    x = reference("resnet50")[0][:1]
    control = RunControl()
    control.cancel()
    with pytest.raises(RunCancelledError, match="run cancelled; stopped") as info:
        model._execute(model.check_inputs([x]), control)
    assert info.value.node in (None, model.graph.nodes[0].name)


def test_runs_with_deadlines_from_several_threads_keep_their_own_flags(model):
    """One run past its deadline does not stop the others running at the same time."""
    x = reference("resnet50")[0][:1]
    expected, seconds = _run_time(model, x)
    results = {}

    def run(i: int, timeout: float) -> None:
        try:
            results[i] = model.run(None, {"in0": x}, timeout=timeout)[0]
        except RunTimeoutError as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(0, seconds / 4)),
               threading.Thread(target=run, args=(1, 600.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(results[0], RunTimeoutError)
    np.testing.assert_array_equal(results[1], expected)


@pytest.mark.parametrize("backend", ["numba", "interpreter", "executor"])
def test_on_node_output_sees_every_node_in_order(backend):
    """The forward cannot call back between kernels: a numba run with on_node_output runs the same
    kernels node by node (the executor's programs), with the forward's result."""
    model = compiler.compile(export_zoo("resnet18"), backend=backend)
    x = reference("resnet18")[0][:1]
    seen = []
    out = model.run(None, {"in0": x}, on_node_output=lambda name, array: seen.append((name, array.copy())))[0]
    assert [name for name, _ in seen] == [n.name for n in model.graph.nodes]
    assert [a.shape for _, a in seen] == [n.outputs[0].shape for n in model.graph.nodes]
    np.testing.assert_array_equal(seen[-1][1], out)
    np.testing.assert_array_equal(out, model(x))
