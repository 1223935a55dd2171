"""plan-memory: liveness analysis and buffer reuse for the intermediates of a scheduled graph.

Every intermediate value gets an offset in one byte arena. Two values may share
bytes only if their lifetimes (from the step that writes them to the last step
that reads them, inclusive) do not overlap, so no kernel ever writes over its
own inputs. Offsets are chosen greedily, largest buffer first, at the lowest
offset that fits (TFLite's arena planner does the same): peak memory ends up
close to the largest set of simultaneously live values.

A value that is a view of another (reshape) shares its buffer and extends its
lifetime. Graph inputs, constants and anything a graph output views get no arena
space: outputs are allocated on their own so callers can keep them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ir.graph import Graph, Node, Value

ALIGN = 64  # bytes: cache-line aligned buffers


@dataclass
class Buffer:
    values: list[Value]  # the value that owns the bytes first, then its views
    nbytes: int
    first: int  # step that writes it
    last: int  # last step that reads it (or a view of it)
    offset: int = -1  # in the arena; -1 when allocated on its own (graph outputs)


@dataclass
class MemoryPlan:
    arena_bytes: int
    buffers: list[Buffer] = field(default_factory=list)
    offsets: dict[Value, int] = field(default_factory=dict)  # arena offset of each planned value
    owned: set[Value] = field(default_factory=set)  # values allocated on their own (outputs)
    views: dict[Value, Value] = field(default_factory=dict)  # view -> the value it views
    total_bytes: int = 0  # every intermediate in its own buffer: memory with no reuse
    peak_live_bytes: int = 0  # the largest set of simultaneously live buffers: the lower bound

    def summary(self) -> str:
        mib = 1 << 20
        return (f"arena {self.arena_bytes / mib:.2f} MiB for {len(self.buffers)} buffers "
                f"(no reuse: {self.total_bytes / mib:.2f} MiB, largest live set: {self.peak_live_bytes / mib:.2f} MiB)")


def plan_memory(graph: Graph, is_view: Callable[[Node], bool]) -> MemoryPlan:
    """Plan the arena for `graph` (nodes in execution order). is_view(node): its output 0 views input 0."""
    root: dict[Value, Value] = {}  # view -> owning value
    for node in graph.nodes:
        if is_view(node):
            src = node.inputs[0]
            root[node.outputs[0]] = root.get(src, src)
    produced = {v for n in graph.nodes for v in n.outputs}
    first: dict[Value, int] = {}
    last: dict[Value, int] = {}
    for step, node in enumerate(graph.nodes):
        for v in node.outputs:
            owner = root.get(v, v)
            first.setdefault(owner, step)
            last[owner] = max(last.get(owner, step), step)
        for v in node.inputs:
            owner = root.get(v, v)
            if owner in produced:
                last[owner] = max(last.get(owner, step), step)
    output_owners = {root.get(v, v) for v in graph.outputs}
    plan = MemoryPlan(0, views={v: r for v, r in root.items()})
    buffers = []
    for owner in first:
        if owner not in produced or owner in root:
            continue
        members = [owner] + [v for v, r in root.items() if r is owner]
        buf = Buffer(members, _aligned(owner.type.nbytes), first[owner], last[owner])
        if owner in output_owners:
            plan.owned.add(owner)
        else:
            buffers.append(buf)
    plan.total_bytes = sum(b.nbytes for b in buffers)
    placed: list[Buffer] = []
    for buf in sorted(buffers, key=lambda b: (-b.nbytes, b.first)):
        buf.offset = _lowest_fit(buf, placed)
        placed.append(buf)
        plan.offsets[buf.values[0]] = buf.offset
    plan.buffers = sorted(placed, key=lambda b: b.first)
    plan.arena_bytes = max((b.offset + b.nbytes for b in placed), default=0)
    steps = range(len(graph.nodes))
    plan.peak_live_bytes = max((sum(b.nbytes for b in placed if b.first <= s <= b.last) for s in steps), default=0)
    return plan


def _lowest_fit(buf: Buffer, placed: list[Buffer]) -> int:
    busy = sorted((b.offset, b.offset + b.nbytes) for b in placed if b.first <= buf.last and buf.first <= b.last)
    offset = 0
    for start, end in busy:
        if offset + buf.nbytes <= start:
            break
        offset = max(offset, end)
    return offset


def _aligned(n: int) -> int:
    return max(ALIGN, -(-n // ALIGN) * ALIGN)
