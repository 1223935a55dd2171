"""Python's cyclic garbage collector, paused while a model compiles.

A compile allocates millions of short-lived objects (numba's IR, types and LLVM wrappers; our
graphs and sources), and the collector runs a pass every 700 allocations it has not freed, a full
pass over every object of the process now and then. In a compile those passes found little to free
and cost a fifth to a quarter of it (cold compile, kernel library cached, 2-core EPYC: ResNet-18
3.6-4.4 -> 2.6-3.4 s, DenseNet-121 13.2 -> 10.0-10.3 s, EfficientNet-B0 8.3-9.6 -> 7.2-7.5 s).
So a compile runs with the collector paused, and then collects once what it allocated (the youngest
generation, where all of it still is: ResNet-18 0.2 s, DenseNet-121 0.4 s), so that its cyclic
garbage is freed at once rather than at some later call (mypy tunes its collector for the same reason).

A first use compiles library kernels inside the compile, each of which leaves its own garbage:
codegen/compile_workers.py collects the youngest generation after each kernel, in the main process and
in its worker processes (which run with the collector off), so that a first use's peak memory stays
bounded by one kernel's garbage (tiny CNN, 2 processes: 264 -> 322 MB in the main process).

Compiles may run in several threads at once: the first to start pauses the collector, the last to
end restores it, and a collector that was already off stays off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0  # compiles running
_was_enabled = False  # whether the collector ran before the first of them paused it


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off; afterwards collect its garbage and restore the collector."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            last = _depth == 0
            if last and _was_enabled:
                gc.enable()
        if last and _was_enabled:
            gc.collect(0)
