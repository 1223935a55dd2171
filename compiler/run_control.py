"""What one run carries besides its arrays: cancellation, a deadline, a node-output callback.

The backends that run node by node (the interpreter, the executor) call `control.check(node)`
before each node, so a cancelled run or one past its deadline stops within one node's time
and raises `RunCancelledError` (`RunTimeoutError` for a deadline) naming the node it stopped
at. `m.run_async(...)` returns a `RunFuture`, whose `cancel()` also stops a run already
under way (a plain Future's cancel() only prevents a run that has not started).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from ir.errors import RunCancelledError, RunTimeoutError

NodeOutputCallback = Callable[[str, np.ndarray], None]


class RunControl:
    """One run's cancellation flag, deadline and node-output callback; shared by the threads of that run."""

    def __init__(self, timeout: float | None = None, on_node_output: NodeOutputCallback | None = None):
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = timeout
        self.deadline = None if timeout is None else time.perf_counter() + timeout
        self.on_node_output = on_node_output
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def stop_reason(self) -> str | None:
        """Why the run must stop now ("cancelled", "timeout"), or None."""
        if self._cancelled.is_set():
            return "cancelled"
        if self.deadline is not None and time.perf_counter() > self.deadline:
            return "timeout"
        return None

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
