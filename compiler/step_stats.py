"""Step stats: what each node of one run did, when and where, as TensorFlow's StepStats.

Every backend that runs node by node (the interpreter, the executor) records one
`NodeStat` per node of every run into `m.last_step_stats`; the numba backend records
them from its timed forward (`m.profile_kernels`). Timestamps are `time.perf_counter()`
readings of this process, so the stats of one run line up across threads.

    stats = m.last_step_stats
    write_chrome_trace(stats, "run.json")   # chrome://tracing or ui.perfetto.dev, one row per thread
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NodeStat:
    node: str
    op: str
    start: float  # time.perf_counter() when the node started
    end: float  # ... and when its outputs were ready
    thread: str  # name of the thread that ran it
    shapes: tuple[tuple[int, ...], ...] = ()  # of its outputs
    nbytes: int = 0  # bytes of its outputs

    @property
    def seconds(self) -> float:
        return self.end - self.start


def output_stat(node: str, op: str, start: float, end: float, thread: str, outputs: Sequence) -> NodeStat:
    """A NodeStat for a node that produced `outputs` (numpy arrays)."""
    return NodeStat(node, op, start, end, thread, tuple(tuple(a.shape) for a in outputs),
                    sum(int(a.nbytes) for a in outputs))


def chrome_trace(stats: Sequence[NodeStat], process: str = "pnnx-jit") -> dict:
    """The Trace Event Format JSON (complete events, microseconds from the run's first start) of one run."""
    origin = min((s.start for s in stats), default=0.0)
    threads = {name: i for i, name in enumerate(dict.fromkeys(s.thread for s in stats))}
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": process}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}}
               for name, tid in threads.items()]
    for s in stats:
        events.append({"name": s.node, "cat": s.op, "ph": "X", "pid": 0, "tid": threads[s.thread],
                       "ts": (s.start - origin) * 1e6, "dur": max(s.seconds, 0.0) * 1e6,
                       "args": {"op": s.op, "shapes": [list(x) for x in s.shapes], "bytes": s.nbytes}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(stats: Sequence[NodeStat], path: str | os.PathLike, process: str = "pnnx-jit") -> None:
    Path(path).write_text(json.dumps(chrome_trace(stats, process)))
