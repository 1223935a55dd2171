"""plan-memory: liveness analysis and buffer reuse for the intermediates of a scheduled graph.

Every intermediate value gets an offset in one byte arena. Two values may share
bytes only if their lifetimes (from the step that writes them to the last step
that reads them, inclusive) do not overlap, so no kernel ever writes over its
own inputs. Offsets are chosen greedily, largest buffer first, at the lowest
offset that fits (TFLite's arena planner does the same): peak memory ends up
close to the largest set of simultaneously live values.

A value that is a view of another (reshape) shares its buffer and extends its
lifetime. So does a value that a concat joins, where it can: when a concat's
output is its inputs laid end to end in memory (the dims before the axis are all
1: batch 1 and channels, say), each input is written by its producer straight
into its part of the concat's buffer, and the concat copies nothing for it. A
concat whose inputs all already lie end to end in another buffer (DenseNet's
`cat([x0, y1])`, `cat([x0, y1, y2])`, ... inside one block) is itself a view of
that buffer: a DenseNet block's features are written once, into one buffer,
instead of once per later layer. Concats are planned last to first, so the
widest concat of such a chain owns the buffer. Values are never written in place,
so every byte of a buffer has one writer, and the buffer lives from its first
member's write to its last member's read.

One exception, where the kernel allows it (`overwritable`): a conv whose epilogue adds
a residual (ResNet's `relu(bn(conv(x)) + identity)`) reads each residual element just
before it writes the output element at the same index, so when nothing reads the
residual afterwards its output takes the residual's buffer. A ResNet-50 at batch 8
then reads its 25 MB identity and writes its output over the same lines, instead of
streaming a third array through memory: 64 -> 256 channels on 56 x 56, 3.12 -> 2.63 ms.

Graph inputs, constants and anything a graph output views get no arena space:
outputs are allocated on their own so callers can keep them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ir.graph import Graph, Node, Value

ALIGN = 64  # bytes: cache-line aligned buffers


def aligned_empty(size: int, dtype) -> np.ndarray:
    """An uninitialised 1-D array of `size` elements whose data starts on a cache line (ALIGN bytes).

    The arena's buffers and the packed weights sit at multiples of ALIGN from their array's start, and
    the kernels' vector loads assume it. numpy aligns its data to 16 bytes only, and glibc's large
    allocations start 16 bytes into a page, so an array from np.empty lands anywhere on a cache line:
    each 64-byte load then splits across two lines. An arena off by 16 bytes: ResNet-18 at batch 8,
    119 or 175 ms; Inception-v3-mini's weights off by 48 bytes at batch 8: 2.36 or 3.53 ms (AMD EPYC)."""
    nbytes = size * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes].view(dtype)


@dataclass
class Buffer:
    values: list[Value]  # the value that owns the bytes first, then the values that live inside it
    nbytes: int
    first: int  # step that writes it (or the first of its values)
    last: int  # last step that reads it (or any value inside it)
    offset: int = -1  # in the arena; -1 when allocated on its own (graph outputs)


@dataclass
class MemoryPlan:
    arena_bytes: int
    buffers: list[Buffer] = field(default_factory=list)
    offsets: dict[Value, int] = field(default_factory=dict)  # arena offset of each value that lives in it
    owned: set[Value] = field(default_factory=set)  # values allocated on their own (outputs)
    views: dict[Value, Value] = field(default_factory=dict)  # view -> the value it views
    in_place: dict[Node, frozenset[int]] = field(default_factory=dict)  # concat -> inputs already in its output
    overwritten: dict[Node, int] = field(default_factory=dict)  # node -> its input whose buffer output 0 took
    total_bytes: int = 0  # every intermediate in its own buffer: memory with no reuse
    peak_live_bytes: int = 0  # the largest set of simultaneously live buffers: the lower bound

    def summary(self) -> str:
        mib = 1 << 20
        joined = sum(len(parts) for parts in self.in_place.values())
        return (f"arena {self.arena_bytes / mib:.2f} MiB for {len(self.buffers)} buffers "
                f"(no reuse: {self.total_bytes / mib:.2f} MiB, largest live set: {self.peak_live_bytes / mib:.2f} MiB"
                + (f"; {joined} concat copies saved" if joined else "")
                + (f"; {len(self.overwritten)} outputs written over their residuals" if self.overwritten else "")
                + ")")


# concat_parts(node): the byte offset of each input inside output 0 when the node is a concat whose
# output is its inputs laid end to end; None for any other node
ConcatParts = Callable[[Node], "list[int] | None"]
# overwritable(node): the index of the input whose bytes the node's kernel may write its output 0 over (it
# reads each of that input's elements just before writing the output element at the same index, and no
# other), or None
Overwritable = Callable[[Node], "int | None"]


def plan_memory(graph: Graph, is_view: Callable[[Node], bool], concat_parts: ConcatParts | None = None,
                overwritable: Overwritable | None = None) -> MemoryPlan:
    """Plan the arena for `graph` (nodes in execution order). is_view(node): its output 0 views input 0."""
    home: dict[Value, tuple[Value, int]] = {}  # value -> (the value whose bytes it lives in, byte offset)
    views: dict[Value, Value] = {}
    for node in graph.nodes:
        if is_view(node):
            home[node.outputs[0]] = (node.inputs[0], 0)
            views[node.outputs[0]] = node.inputs[0]

    def locate(v: Value) -> tuple[Value, int]:
        offset = 0
        while v in home:
            v, step = home[v]
            offset += step
        return v, offset

    produced = {v for n in graph.nodes for v in n.outputs}
    output_roots = {locate(v)[0] for v in graph.outputs}
    in_place: dict[Node, frozenset[int]] = {}
    if concat_parts is not None:
        for node in reversed(graph.nodes):
            parts = concat_parts(node)
            if parts is not None:
                placed = _join(node, parts, home, locate, produced, output_roots)
                if placed:
                    in_place[node] = placed

    overwritten = {} if overwritable is None else _write_over(graph, overwritable, home, locate, produced,
                                                                output_roots)
    first: dict[Value, int] = {}
    last: dict[Value, int] = {}
    for step, node in enumerate(graph.nodes):
        for v in node.outputs:
            root = locate(v)[0]
            first.setdefault(root, step)
            last[root] = max(last.get(root, step), step)
        for v in node.inputs:
            root = locate(v)[0]
            if root in produced:
                last[root] = max(last.get(root, step), step)
    members: dict[Value, list[Value]] = {}
    for v in produced:
        members.setdefault(locate(v)[0], []).append(v)
    plan = MemoryPlan(0, views=views, in_place=in_place, overwritten=overwritten)
    buffers = []
    for root in first:
        if root not in produced or root in home:
            continue
        inside = sorted((v for v in members[root] if v is not root), key=lambda v: locate(v)[1])
        buf = Buffer([root, *inside], _aligned(root.type.nbytes), first[root], last[root])
        if root in output_roots:
            plan.owned.add(root)
        else:
            buffers.append(buf)
    plan.total_bytes = sum(_aligned(v.type.nbytes) for b in buffers for v in b.values if v not in views)
    placed: list[Buffer] = []
    for buf in sorted(buffers, key=lambda b: (-b.nbytes, b.first)):
        buf.offset = _lowest_fit(buf, placed)
        placed.append(buf)
        for v in buf.values:
            plan.offsets[v] = buf.offset + locate(v)[1]
    plan.buffers = sorted(placed, key=lambda b: b.first)
    plan.arena_bytes = max((b.offset + b.nbytes for b in placed), default=0)
    steps = range(len(graph.nodes))
    plan.peak_live_bytes = max((sum(b.nbytes for b in placed if b.first <= s <= b.last) for s in steps), default=0)
    return plan


def _join(node: Node, parts: list[int], home: dict[Value, tuple[Value, int]],
          locate: Callable[[Value], tuple[Value, int]], produced: set[Value],
          output_roots: set[Value]) -> frozenset[int]:
    """Place a concat's inputs inside its output where they can go (recording it in `home`);
    the indices of the inputs that then lie where the concat would copy them."""
    out = node.outputs[0]
    host = locate(out)[0]
    if host in output_roots:
        return frozenset()
    located = [locate(v) for v in node.inputs]
    root, start = located[0]
    if (out not in home and root in produced and root not in output_roots and root is not out
            and all(r is root and offset == start + part for (r, offset), part in zip(located, parts))):
        home[out] = (root, start)  # already end to end in one buffer: the concat is a view of it
        return frozenset(range(len(node.inputs)))
    placed = set()
    for i, (v, part) in enumerate(zip(node.inputs, parts)):
        owner, offset = located[i]
        if (offset == 0 and owner.type.nbytes == v.type.nbytes and owner in produced and owner not in home
                and owner not in output_roots and owner is not host):
            home[owner] = (out, part)
            placed.add(i)
    return frozenset(placed)


def _write_over(graph: Graph, overwritable: Overwritable, home: dict[Value, tuple[Value, int]],
                locate: Callable[[Value], tuple[Value, int]], produced: set[Value],
                output_roots: set[Value]) -> dict[Node, int]:
    """Give each node that may write its output over an input (overwritable) that input's buffer,
    recording it in `home`, where the input is a whole buffer of the output's size and type, is no
    other input of the node, and every value in that buffer was written before and is read for the
    last time by this node. Returns node -> the input's index."""
    written: dict[Value, int] = {}
    last_read: dict[Value, int] = {}
    for step, node in enumerate(graph.nodes):
        for v in node.outputs:
            written[v] = step
        for v in node.inputs:
            last_read[v] = step
    members: dict[Value, list[Value]] = {}
    for v in produced:
        members.setdefault(locate(v)[0], []).append(v)
    overwritten: dict[Node, int] = {}
    for step, node in enumerate(graph.nodes):
        i = overwritable(node)
        if i is None:
            continue
        out, old = node.outputs[0], node.inputs[i]
        root, offset = locate(old)
        if (out in home or out in output_roots or root not in produced or root in output_roots or offset != 0
                or not old.type.nbytes == out.type.nbytes == root.type.nbytes or old.type.dtype != out.type.dtype
                or any(locate(v)[0] is root for k, v in enumerate(node.inputs) if k != i)
                or any(written[m] > step or last_read.get(m, -1) > step for m in members[root])):
            continue
        home[out] = (root, 0)
        members[root] += members.pop(out)
        overwritten[node] = i
    return overwritten


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
