"""Run a named pipeline of passes, verifying the IR after each and optionally dumping it.

A pass is a pure `Graph -> Graph` function with a printed name (see `Pass`);
the pipeline is a flat list you can read top to bottom (compiler/passes/__init__.py).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ir.errors import VerificationError
from ir.graph import Graph
from ir.printer import print_graph
from ir.verifier import verify

DUMP_ENV = "PNNX_JIT_DUMP_IR"  # directory to dump IR after each pass (same as dump_ir=)


@dataclass(frozen=True)
class Pass:
    """A named Graph -> Graph function. `name` is what dumps, errors and `show --after` use."""

    name: str
    run: Callable[[Graph], Graph]

    def __call__(self, graph: Graph) -> Graph:
        return self.run(graph)


@dataclass
class PassRecord:
    name: str
    seconds: float
    nodes_before: int
    nodes_after: int


@dataclass
class PassManager:
    passes: Sequence[Pass]
    dump_dir: str | os.PathLike | None = None
    on_step: Callable[[str], None] | None = None  # progress hook (e.g. a progress bar)
    records: list[PassRecord] = field(default_factory=list)

    def run(self, graph: Graph) -> Graph:
        dump_dir = self.dump_dir or os.environ.get(DUMP_ENV) or None
        if dump_dir:
            Path(dump_dir).mkdir(parents=True, exist_ok=True)
            _dump(dump_dir, 0, "input", graph)
        done: list[str] = []
        for i, p in enumerate(self.passes, start=1):
            if self.on_step:
                self.on_step(p.name)
            start = time.perf_counter()
            before = len(graph.nodes)
            graph = p(graph)
            try:
                verify(graph)
            except VerificationError as exc:
                after = f" (after {', '.join(done)})" if done else ""
                raise VerificationError(f"pass {p.name}{after} left invalid IR: {exc}") from exc
            self.records.append(PassRecord(p.name, time.perf_counter() - start, before, len(graph.nodes)))
            done.append(p.name)
            if dump_dir:
                _dump(dump_dir, i, p.name, graph)
        return graph


def _dump(directory: str | os.PathLike, index: int, name: str, graph: Graph) -> None:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    Path(directory, f"{index:02d}-{safe}.ir").write_text(print_graph(graph))
