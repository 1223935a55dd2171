"""What one run carries besides its arrays: cancellation, a deadline, a node-output callback.

The backends that run node by node (the interpreter, the executor) call `control.check(node)`
before each node, so a cancelled run or one past its deadline stops within one node's time
and raises `RunCancelledError` (`RunTimeoutError` for a deadline) naming the node it stopped
at. The numba backend's forward cannot call back into Python between its kernels; it polls
`control.flags` instead, which cancel() sets and, at the deadline, the watchdog thread.
`m.run_async(...)` returns a `RunFuture`, whose `cancel()` also stops a run already
under way (a plain Future's cancel() only prevents a run that has not started).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from ir.errors import RunCancelledError, RunTimeoutError

NodeOutputCallback = Callable[[str, np.ndarray], None]

# flags[0] of a run: why it must stop (codegen/emitter.py's forward polls it between nodes)
RUNNING, CANCELLED, TIMED_OUT = 0, 1, 2
_REASONS = {CANCELLED: "cancelled", TIMED_OUT: "timeout"}


class RunControl:
    """One run's cancellation flag, deadline and node-output callback; shared by the threads of that run."""

    def __init__(self, timeout: float | None = None, on_node_output: NodeOutputCallback | None = None):
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = timeout
        self.deadline = None if timeout is None else time.perf_counter() + timeout
        self.on_node_output = on_node_output
        # [why it must stop, the step it stopped before]: what a compiled forward polls between nodes
        self.flags = np.zeros(2, np.int64)
        if self.deadline is not None:
            _WATCHDOG.watch(self.deadline, self.flags)

    def cancel(self) -> None:
        if self.flags[0] == RUNNING:
            self.flags[0] = CANCELLED

    @property
    def cancelled(self) -> bool:
        return self.flags[0] == CANCELLED

    def stop_reason(self) -> str | None:
        """Why the run must stop now ("cancelled", "timeout"), or None."""
        if self.flags[0] == RUNNING and self.deadline is not None and time.perf_counter() > self.deadline:
            self.flags[0] = TIMED_OUT
        return _REASONS.get(int(self.flags[0]))

    def check(self, node: str) -> None:
        """Raise if the run must stop before `node` runs."""
        reason = self.stop_reason()
        if reason is not None:
            raise self.error(reason, node)

    def error(self, reason: str, node: str | None) -> RunCancelledError:
        where = f" before node {node}" if node else ""
        if reason == "timeout":
            return RunTimeoutError(f"run passed its deadline of {self.timeout} s; stopped{where}", node)
        return RunCancelledError(f"run cancelled; stopped{where}", node)


class _Watchdog:
    """One daemon thread that sets the flags of runs whose deadline has passed, for the numba backend's
    forward, which polls them between nodes but cannot read a clock. A deadline costs a heap push;
    the thread starts with the first one and sleeps until the earliest."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, np.ndarray]] = []
        self._order = itertools.count()  # ties: never compare the arrays
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float, flags: np.ndarray) -> None:
        with self._wake:
            heapq.heappush(self._heap, (deadline, next(self._order), flags))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pnnx-jit-deadlines", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        with self._wake:
            while True:
                if not self._heap:
                    self._wake.wait()
                    continue
                deadline, _, flags = self._heap[0]
                left = deadline - time.perf_counter()
                if left > 0:
                    self._wake.wait(left)
                    continue
                heapq.heappop(self._heap)
                if flags[0] == RUNNING:  # a run that ended long ago keeps its result: it is no longer read
                    flags[0] = TIMED_OUT


_WATCHDOG = _Watchdog()

# the control of a plain call m(x): never cancelled, no deadline, no callback (one for every call)
UNCONTROLLED = RunControl()


class RunFuture(Future):
    """The Future of `m.run_async(...)`: cancel() also stops a running run (at the next node)."""

    def __init__(self, control: RunControl):
        super().__init__()
        self.control = control

    def cancel(self) -> bool:
        if super().cancel():  # not started: it never will
            return True
        if self.done():
            return False
        self.control.cancel()  # under way: it stops at its next node and raises RunCancelledError
        return True


def start_async(run: Callable[[RunControl], list], control: RunControl) -> RunFuture:
    """Run run(control) on a new thread; its result or error lands in the returned future."""
    future = RunFuture(control)

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            result = run(control)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            future.set_exception(exc)
        else:
            future.set_result(result)

    threading.Thread(target=work, name="pnnx-jit-run", daemon=True).start()
    return future
