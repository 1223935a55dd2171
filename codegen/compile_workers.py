"""Compile the kernels a model is missing on every core: the main process and worker processes.

The first model compiled on a machine finds few of its kernels in numba's cache, and each costs
seconds to tens of seconds of numba's time (ResNet-18's five: ~50 s on a 2-core EPYC), which one
process spends one kernel after the other (numba compiles under a global lock). Here the main
process takes kernels from a shared list and compiles them itself, while each worker process
takes the next one, compiles it into numba's on-disk cache and asks for another; the main
process then loads the workers' kernels from the cache in a fraction of a second each.

Only kernels of the library (`codegen.kernels.*`: a fresh interpreter imports them by name) go
to workers; the model's own generated kernels compile in the main process. A worker that cannot
start or fails a kernel only costs time: whatever is still missing afterwards compiles in the
main process as before, which also reports any real error.

Workers are plain `python -m codegen.compile_workers` subprocesses talking pickles over their
standard input and output, not multiprocessing's: its spawn and forkserver methods import the
caller's `__main__` in each worker, which re-runs a user's script that has no main guard, and
forking a process whose numba threads are running is unsafe.

How many processes in all: `$PNNX_JIT_COMPILE_PROCESSES` (1: the main process alone), else one
per usable core, at most MAX_PROCESSES.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from numba.core.dispatcher import Dispatcher

log = logging.getLogger(__name__)

LIBRARY = "codegen.kernels."  # kernels whose module a worker imports by name
MAX_PROCESSES = 8
ENV = "PNNX_JIT_COMPILE_PROCESSES"


class Job(NamedTuple):
    """One kernel for one signature: what a worker compiles, by names it can import."""

    module: str
    qualname: str
    argtypes: tuple  # numba types (they pickle)

    @property
    def label(self) -> str:
        return f"{self.module.rsplit('.', 1)[-1]}.{self.qualname}"


def process_count(jobs: int) -> int:
    """Processes to compile `jobs` kernels with, the main one included (see the module docstring)."""
    wanted = min(_usable_cores(), MAX_PROCESSES)
    setting = os.environ.get(ENV, "").strip()
    if setting:
        if setting.isdigit() and int(setting) >= 1:
            wanted = int(setting)
        else:
            log.warning("ignoring $%s=%r: it must be a whole number of processes, at least 1 (the main "
                        "process alone); using %d", ENV, setting, wanted)
    return max(1, min(wanted, jobs))


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def compile_jobs(jobs: Sequence[Job], compile_here: Callable[[Job], None]) -> None:
    """Compile `jobs` in this process (compile_here) and in worker processes, all at once.

    Returns when every job has been tried; a job a worker failed is left to the caller, which
    finds it missing from numba's cache and compiles it itself (and so reports its error)."""
    pending = list(jobs)
    processes = process_count(len(pending))
    workers = min(processes - 1, sum(job.module.startswith(LIBRARY) for job in pending))
    if not sys.executable:  # an embedded interpreter: no python to start workers with
        workers = 0
    log.info("compiling %d kernel%s for this machine, once (numba caches them)%s: %s", len(pending),
             "s" if len(pending) > 1 else "", f" in {workers + 1} processes" if workers else "",
             _summary(pending))

    def compile_timed(job: Job) -> None:
        start = time.perf_counter()
        compile_here(job)
        gc.collect(0)  # the kernel's garbage, which the paused collector (compiler/gc_pause.py) leaves
        log.info("compiled %s in %.1f s", job.label, time.perf_counter() - start)

    if workers == 0:
        for job in pending:
            compile_timed(job)
        return
    shared = _Shared(pending)
    first = shared.take(for_worker=False)  # the first kernel here: a worker spends seconds importing numba first
    threads = [threading.Thread(target=_feed_worker, args=(shared,), daemon=True) for _ in range(workers)]
    for thread in threads:
        thread.start()
    try:
        job = first
        while job is not None:
            compile_timed(job)
            job = shared.take(for_worker=False, done=job)
    except BaseException:  # an error or Ctrl-C here: no worker outlives the call
        shared.stop()
        raise
    finally:
        for thread in threads:
            thread.join()


class _Shared:
    """The jobs not yet taken, and the worker processes, shared by the main thread and the feeders."""

    def __init__(self, pending: list[Job]):
        self.pending, self.workers, self.stopped = pending, [], False
        self.running: Counter[str] = Counter()  # modules of the jobs being compiled
        self.lock = threading.Lock()

    def take(self, for_worker: bool, done: Job | None = None) -> Job | None:
        """The next job for a worker (a library kernel) or for the main process (the kernels only it can
        compile first), after `done`, the caller's last. In the order given (the longest first), but a
        kernel of a module no other process is compiling before one of such a module: kernels of one
        module share callees, which the first to compile them saves to numba's cache for the other."""
        with self.lock:
            if done is not None:
                self.running[done.module] -= 1
            if self.stopped:
                return None
            fits = [i for i, job in enumerate(self.pending) if job.module.startswith(LIBRARY) or not for_worker]
            if not fits:
                return None
            job = self.pending.pop(min(fits, key=lambda i: (  # the first of the best: in order otherwise
                self.running[self.pending[i].module] > 0,
                not for_worker and self.pending[i].module.startswith(LIBRARY))))
            self.running[job.module] += 1
            return job

    def start_worker(self) -> subprocess.Popen | None:
        root = str(Path(__file__).resolve().parents[1])  # where `codegen` is imported from here
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
               ENV: "1"}
        with self.lock:
            if self.stopped:
                return None
            worker = subprocess.Popen([sys.executable, "-m", "codegen.compile_workers"], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            self.workers.append(worker)
            return worker

    def stop(self) -> None:
        """Hand out no more jobs; end the workers (one still compiling is killed: its kernel is
        not saved, numba writes a cache entry only once it is complete)."""
        with self.lock:
            self.stopped = True
            for worker in self.workers:
                if worker.poll() is None:
                    worker.kill()


def _summary(jobs: Sequence[Job]) -> str:
    """'conv.conv2d x2, gemm.linear': the kernels of `jobs`, with how many signatures where several."""
    counts = Counter(job.label for job in jobs)
    return ", ".join(label if n == 1 else f"{label} x{n}" for label, n in counts.items())


def _feed_worker(shared: _Shared) -> None:
    """Run one worker process, handing it jobs until none is left (or it fails)."""
    try:
        worker = shared.start_worker()
    except OSError as exc:
        log.debug("cannot start a kernel compile worker: %s", exc)
        return
    if worker is None:
        return
    try:
        job = shared.take(for_worker=True)
        while job is not None:
            start = time.perf_counter()
            pickle.dump(job, worker.stdin)
            worker.stdin.flush()
            problem = pickle.load(worker.stdout)
            if problem:
                log.debug("worker failed to compile %s: %s", job.label, problem)
            else:
                log.info("compiled %s in %.1f s (worker)", job.label, time.perf_counter() - start)
            job = shared.take(for_worker=True, done=job)
    except (OSError, EOFError, pickle.UnpicklingError) as exc:  # the worker died: the caller compiles what is left
        log.debug("kernel compile worker stopped: %r", exc)
    finally:
        try:
            worker.stdin.close()
        except OSError:
            pass
        worker.wait()


def compile_cost(dispatcher: Dispatcher) -> int:
    """A kernel's compile time, roughly: the length of the source of its function and of every jitted
    function it reaches through its module's globals (correlation 0.79 with the measured times of the
    library's kernels). Jobs sorted by it, longest first, keep every process busy to the end."""
    from numba.core.dispatcher import Dispatcher  # at run time: this module imports numba lazily

    seen: set[int] = set()

    def reach(function) -> int:
        if id(function) in seen:
            return 0
        seen.add(id(function))
        try:
            total = len(inspect.getsource(function))
        except (OSError, TypeError):
            total = 0
        names: set[str] = set()
        codes = [function.__code__]
        while codes:
            code = codes.pop()
            names.update(code.co_names)
            codes.extend(c for c in code.co_consts if isinstance(c, type(code)))
        for name in names:
            callee = function.__globals__.get(name)
            if isinstance(callee, Dispatcher):
                total += reach(callee.py_func)
        return total

    return reach(dispatcher.py_func)


def compile_kernels(kernels: dict[Job, Dispatcher]) -> None:
    """compile_jobs of each job's kernel (its dispatcher), the longest (compile_cost) first."""
    jobs = sorted(kernels, key=lambda job: compile_cost(kernels[job]), reverse=True)
    compile_jobs(jobs, lambda job: kernels[job].compile(job.argtypes))


def compile_job(job: Job) -> None:
    """Compile (or load from numba's cache) job's kernel for its argument types, in this process."""
    dispatcher = importlib.import_module(job.module)
    for part in job.qualname.split("."):
        dispatcher = getattr(dispatcher, part)
    dispatcher.compile(job.argtypes)


def _serve() -> None:
    """A worker: compile each job read from stdin; answer None, or what went wrong, on stdout."""
    requests, replies = sys.stdin.buffer, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # anything printed goes to stderr, not into the replies
    gc.disable()  # as in a compile (compiler/gc_pause.py): each job's garbage is collected once, after it
    while True:
        try:
            job = pickle.load(requests)
        except EOFError:
            return
        try:
            compile_job(job)
            problem = None
        except Exception as exc:  # reported to the main process, which compiles the job itself
            problem = f"{type(exc).__name__}: {exc}"
        pickle.dump(problem, replies)
        replies.flush()
        gc.collect(0)  # while the main process sends the next job


if __name__ == "__main__":
    _serve()
