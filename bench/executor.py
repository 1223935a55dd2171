"""The executor backend against the numba forward and the interpreter, on a few zoo models at batch 1.

    python -m bench.executor [--models resnet18 inception_v3_mini shufflenet_v2_mini] [--threads 2]
                             [--policies sized all one adaptive] [--rounds 5] [--repeat 20]

Every runtime of a model is timed in one process, interleaved: each round takes the median of
`repeat` calls of each runtime in turn, and a runtime's figure is its best round (the least disturbed
by other processes). --policies times the executor under each thread policy of
compiler/executor.py's KERNEL_THREADS. The machine line names the CPU, its cores and vector ISA, and
each row how much of the CPU other processes used while it was measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

import compiler
from bench import zoo
from bench.pnnx_export import export_zoo
from bench.runtimes import cpu_name, isa
from bench.zoo_bench import CpuClock
from bench.zoo_probe import limit_numpy_blas
from compiler.executor import KERNEL_THREADS, Executor

MODELS = ["resnet18", "inception_v3_mini", "shufflenet_v2_mini"]


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def runtimes(name: str, threads: int, policies: list[str]) -> tuple[dict[str, Callable[[], object]], Executor]:
    """The calls to time for one model: the numba forward, the executor under each policy, the interpreter."""
    param = export_zoo(name, batch=1)
    x = zoo.make_input(zoo.get(name), batch=1, seed=0)
    numba_model = compiler.compile(param, threads=threads)
    executor = compiler.compile(param, backend="executor", threads=threads)
    interpreter = compiler.compile(param, backend="interpreter")
    np.testing.assert_array_equal(executor(x), numba_model(x))  # the same kernels: the same bits

    def under(policy: str) -> Callable[[], object]:
        def call() -> object:
            executor.policy = policy
            return executor(x)
        return call

    calls = {"numba": lambda: numba_model(x)}
    calls.update((f"executor[{p}]", under(p)) for p in policies)
    calls["interpreter"] = lambda: interpreter(x)
    return calls, executor


def measure(calls: dict[str, Callable[[], object]], rounds: int, repeat: int) -> dict[str, float]:
    """The best round's median ms of each call, rounds interleaved; the interpreter gets fewer calls."""
    for fn in calls.values():  # warm-up: first-call costs, thread pools started
        for _ in range(3):
            fn()
    best = {label: float("inf") for label in calls}
    for _ in range(rounds):
        for label, fn in calls.items():
            best[label] = min(best[label], median_ms(fn, max(3, repeat // 4) if label == "interpreter" else repeat))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=MODELS, choices=sorted(zoo.ZOO))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--policies", nargs="+", default=["sized"], choices=list(KERNEL_THREADS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    limit_numpy_blas(args.threads)  # the interpreter's BLAS on the same threads
    load = os.getloadavg()[0]
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs, {isa()}; {args.threads} threads; batch 1; "
          f"load average {load:.2f} at the start; best of {args.rounds} interleaved rounds of "
          f"{args.repeat} calls (median)", flush=True)
    rows = []
    for name in args.models:
        calls, executor = runtimes(name, args.threads, args.policies)
        clock = CpuClock()
        best = measure(calls, args.rounds, args.repeat)
        rows.append((f"{name} ({len(executor.graph.nodes)} nodes)", best, clock.others_share()))
    labels = list(rows[0][1])
    print("| model | " + " | ".join(f"{label} ms" for label in labels) + " | others' CPU |")
    print("|---|" + "--:|" * (len(labels) + 1))
    for model, best, others in rows:
        print(f"| {model} | " + " | ".join(f"{best[label]:.3g}" for label in labels) + f" | {others:.0%} |")


if __name__ == "__main__":
    main()
