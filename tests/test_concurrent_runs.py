"""Several runs of one model at once, from several threads, on every backend: each gives what the same
call gives alone, bit for bit (the same kernels on the same arrays: no run sees another's buffers).

Each thread runs its own input, so a run that read or wrote another's arrays (an arena, a pending
count, a value slot shared by mistake) would show as a wrong result, not pass unseen."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import compiler
from bench import zoo
from bench.pnnx_export import export_zoo

THREADS = 4
CALLS = {"numba": 20, "executor": 20, "interpreter": 4}  # the interpreter takes ~10x as long a call


def _run_at_once(model, inputs: list[np.ndarray], calls: int) -> list[list[np.ndarray]]:
    """Thread t calls model(inputs[t]) `calls` times, all threads released together; their results."""
    results: list[list[np.ndarray]] = [[] for _ in inputs]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(inputs))

    def work(t: int) -> None:
        try:
            barrier.wait()
            for _ in range(calls):
                results[t].append(model(inputs[t]))
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,), name=f"caller-{t}") for t in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("backend", ["numba", "executor", "interpreter"])
@pytest.mark.parametrize("name", ["resnet18", "inception_v3_mini"])
def test_runs_at_once_equal_runs_alone(name, backend):
    model = compiler.compile(export_zoo(name), backend=backend, threads=2)
    inputs = [zoo.make_input(zoo.get(name), batch=1, seed=seed) for seed in range(THREADS)]
    alone = [model(x) for x in inputs]
    together = _run_at_once(model, inputs, CALLS[backend])
    for t, (expected, got) in enumerate(zip(alone, together)):
        assert len(got) == CALLS[backend]
        for result in got:
            np.testing.assert_array_equal(result, expected, err_msg=f"{name} {backend}, thread {t}")
