"""The executor backend: the numba backend's kernels, node by node, independent nodes at once.

As TensorFlow's executor (executor.cc): a GraphView built once says, per node, which values it
reads and writes, which nodes read its outputs and whether it is expensive; each run keeps its own
pending-input count per node, and a node whose count reaches zero is ready. The thread that
finished a node runs the cheap nodes it readied itself, in order, and hands the expensive ones to a
thread pool (kept by the model between runs), but for one it keeps when it has nothing cheap to do:
a chain (ResNet) runs on the calling thread with no hand-off at all, and branches worth a hand-off
(CostModel) spread over the pool. Each value is dropped when its last reader is done (a count
per value, as the interpreter's release plan), so memory stays near the live set.

Nodes run the programs of codegen/node_programs.py: plain Python calling the @njit(nogil=True)
kernels of the compiled forward, so two nodes' kernels do run at once; each has its own output
arrays (no arena: branches run at once). A node without a kernel runs its numpy reference.

Threads: the kernels' own parallel loops run on numba's pool (OpenMP here), whose thread count is
set per calling thread, so each node sets its own (KERNEL_THREADS), and CostModel says which nodes
are handed off and which are wide. Measured with `python -m bench.executor --policies all one
adaptive sized` (batch 1, threads=2, best of 7 interleaved rounds of 20-call medians, ms; three
processes; 2-core Intel Xeon VM (Sapphire Rapids, AVX-512), others' CPU 0-1%, load average 0.6-1.4):

    model               numba           all             one             adaptive        sized
    resnet18            19.4 21.1 19.6  20.8 22.9 18.8  29.6 34.0 29.3  18.1 21.3 18.9  19.0 23.0 18.5
    inception_v3_mini   1.04 1.14 0.96  1.49 1.34 1.16  1.38 1.24 1.24  1.32 1.34 1.25  1.27 1.31 1.23
    shufflenet_v2_mini  .252 .315 .244  .464 .660 .434  .396 .647 .368  .445 .677 .435  .412 .648 .395
    yolov5s             139             140             203             166             146
    densenet121         39.0            48.0            70.2            49.3            52.7

(a) "all" (every kernel on every core) oversubscribes when nodes overlap and pays a parallel loop's
fork and join on tiny kernels: worst on the small models. (b) "one" leaves the cores of a chain
idle: ResNet-18 1.5x slower. (c) "adaptive" (cores // nodes running) fixes a node's threads at its
start, so a long node that began beside a short one keeps one thread (YOLOv5s 166 against 140).
(d) "sized", the default: a wide node (>= 1e7 FLOPs or 1 MiB written) gets cores // (wide nodes
running) threads, any other node one thread. Best or within noise of it on the chain and the small
branchy models, 5-10% behind "all" on YOLOv5s and DenseNet-121; and on a machine where another
process holds a core it degrades least (inception_v3_mini with one core taken: numba 17.7 ms,
"sized" 3.2 ms: a one-thread kernel does not wait for a descheduled partner).

Hand-offs: handing the branches of inception_v3_mini to the pool (CostModel(0, 0)) costs more than it
gains here ("one": 1.66-1.76 ms against 1.24 with no hand-off), since each branch's nodes take 10-80 us
and every crossing of threads pays a wake-up and the GIL hand-overs at each kernel call (25-90 us on
this VM); on YOLOv5s, with "all", handing off chains of >= 1e8 FLOPs gave 146-158 ms against 162-176
without. So only chains of >= 1e8 FLOPs (or 16 MiB) are handed off: none in the mini models.

Against the numba forward, the executor is level on large nodes (ResNet-18, YOLOv5s) and slower on
small ones: a node costs about 2 us of Python to call its kernels and 4-5 us to schedule (ShuffleNetV2
mini's 39 nodes: 0.25 ms forward, 0.40 ms executor); DenseNet-121's concats copy here (58 of them)
where the forward's memory plan writes them in place.
"""

from __future__ import annotations

import math
import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np

import codegen.runtime  # noqa: F401 - thread policy before numba's pool starts
from codegen.node_programs import NodePrograms, build_node_programs
from compiler.interpreter import run_node
from compiler.model import CompiledModel, owned
from compiler.run_control import RunControl
from compiler.step_stats import NodeStat
from ir.errors import NodeExecutionError, RunCancelledError
from ir.graph import Graph, Node, Value
from ir.ops.fused import CONV_OPS, conv_weight
from ir.ops.layout import expand_depthwise_macs
from ir.printer import print_graph

# -- what a node costs: the one place that decides ---------------------------------------------------

RECURRENT = frozenset({"lstm", "gru", "rnn"})  # sequential scans of small GEMMs: long whatever their size


@dataclass(frozen=True)
class CostModel:
    """Which nodes are expensive (handed to the pool when ready with others) and which are wide (worth
    more than one thread for their kernels), from their FLOPs (2 per multiply-add of a conv, linear or
    matmul) and the bytes they write. The defaults are this module's measurements (module docstring)."""

    # a hand-off costs a wake-up of a pool thread and a GIL hand-over at each kernel call after it
    # (25-90 us each on a 2-core VM): worth it for the chain of nodes it starts (chain_costs) when that
    # costs this much
    hand_off_flops: int = 100_000_000
    hand_off_bytes: int = 16 << 20
    # below this, a parallel loop's fork and join (and waking numba's workers after a run of one-thread
    # nodes) cost what the second thread saves
    wide_flops: int = 10_000_000
    wide_bytes: int = 1 << 20

    def expensive(self, node: Node, chain: tuple[int, int]) -> bool:
        return node.op in RECURRENT or chain[0] >= self.hand_off_flops or chain[1] >= self.hand_off_bytes

    def wide(self, node: Node) -> bool:
        flops, nbytes = node_cost(node)
        return node.op in RECURRENT or flops >= self.wide_flops or nbytes >= self.wide_bytes


def node_cost(node: Node) -> tuple[int, int]:
    """(FLOPs, bytes written) of a node: 2 per multiply-add of a conv, linear or matmul (0 for other ops)."""
    out = node.outputs[0].shape
    flops = 0
    if node.op in CONV_OPS:
        flops = 2 * math.prod(out) * math.prod(conv_weight(node).shape[1:])
    elif node.op == "blocked_expand_depthwise":
        flops = 2 * expand_depthwise_macs(node)
    elif node.op in ("conv_transpose2d", "blocked_conv_transpose2d"):  # each input pixel times the whole weight
        x = node.inputs[0].shape
        flops = 2 * x[0] * x[2] * x[3] * math.prod(node.inputs[1].shape)
    elif node.op in ("linear", "fused_linear", "matmul"):
        flops = 2 * math.prod(out) * node.inputs[0].shape[-1]
    return flops, sum(v.type.nbytes for v in node.outputs)


def chain_costs(graph: Graph, consumers: list[list[int]], pending: list[int]) -> list[tuple[int, int]]:
    """Per node, the cost of the chain it starts: itself, and on through each node that is its only
    consumer and reads no other node (the thread that runs a node runs that chain next). An Inception
    branch's 1x1 conv is cheap, its branch may not be: it is the branch that a hand-off moves."""
    chain = [(0, 0)] * len(graph.nodes)
    for i in reversed(range(len(graph.nodes))):
        flops, nbytes = node_cost(graph.nodes[i])
        if len(consumers[i]) == 1 and pending[consumers[i][0]] == 1:
            next_flops, next_bytes = chain[consumers[i][0]]
            flops, nbytes = flops + next_flops, nbytes + next_bytes
        chain[i] = (flops, nbytes)
    return chain


# -- the graph, as the executor reads it ------------------------------------------------------------


@dataclass(frozen=True)
class NodeView:
    node: Node
    run: Callable[..., tuple[np.ndarray, ...]]  # the node's program (codegen/node_programs.py)
    inputs: tuple[int, ...]  # slots of the arrays run() takes
    outputs: tuple[int, ...]  # slots its outputs go to
    consumers: tuple[int, ...]  # nodes that read any of its outputs, each once
    pending: int  # nodes whose outputs it reads: it is ready when they are all done
    expensive: bool  # handed to the pool when ready with other nodes (CostModel)
    wide: bool  # its kernels may use several threads (CostModel)

    def stat(self, start: float, end: float, thread: str) -> NodeStat:
        """The node's NodeStat; its outputs' shapes and bytes are the IR's (kernels and references fill arrays
        of the IR's types, interpreter.run_node checks)."""
        outputs = self.node.outputs
        return NodeStat(self.node.name, self.node.op, start, end, thread, tuple(v.shape for v in outputs),
                        sum(v.type.nbytes for v in outputs))


@dataclass(frozen=True)
class GraphView:
    """What a run needs of the graph, built once: immutable, shared by every run."""

    nodes: tuple[NodeView, ...]
    roots: tuple[int, ...]  # nodes ready at the start
    readers: tuple[int, ...]  # per slot: nodes that read it, + 1 for a graph output (never dropped)
    inputs: tuple[int, ...]  # slots of the graph's inputs
    outputs: tuple[Value, ...]
    slots: dict[Value, int]  # every value that is not a constant

    @staticmethod
    def build(graph: Graph, programs: NodePrograms, costs: CostModel) -> GraphView:
        values = list(graph.inputs) + [v for node in graph.nodes for v in node.outputs]
        slots = {v: i for i, v in enumerate(values)}
        producer = {v: i for i, node in enumerate(graph.nodes) for v in node.outputs}
        readers = [0] * len(slots)
        consumers: list[list[int]] = [[] for _ in graph.nodes]
        nodes = []
        for i, (node, program) in enumerate(zip(graph.nodes, programs.programs)):
            for v in program.inputs:
                readers[slots[v]] += 1
            sources = dict.fromkeys(producer[v] for v in program.inputs if v in producer)
            for p in sources:
                consumers[p].append(i)
            nodes.append((node, program, len(sources)))
        for v in graph.outputs:
            if v in slots:
                readers[slots[v]] += 1
        chains = chain_costs(graph, consumers, [pending for _, _, pending in nodes])
        views = tuple(NodeView(node, program.run, tuple(slots[v] for v in program.inputs),
                               tuple(slots[v] for v in node.outputs), tuple(consumers[i]), pending,
                               costs.expensive(node, chains[i]), costs.wide(node))
                      for i, (node, program, pending) in enumerate(nodes))
        return GraphView(views, tuple(i for i, n in enumerate(views) if n.pending == 0), tuple(readers),
                         tuple(slots[v] for v in graph.inputs), tuple(graph.outputs), slots)


# -- threads ----------------------------------------------------------------------------------------


class _Pool:
    """Threads named executor-0, executor-1 ..., started at the first hand-off and kept between runs;
    they hold no reference to the model (a finalizer of the model stops them)."""

    def __init__(self, size: int, name: str = "executor"):
        self.size, self.name = size, name
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = False

    def submit(self, fn: Callable[[int], None], arg: int) -> None:
        if not self._started:
            self._start()
        self._work.put((fn, arg))

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            for i in range(self.size):
                threading.Thread(target=_worker, args=(self._work,), name=f"{self.name}-{i}", daemon=True).start()
            self._started = True

    def stop(self) -> None:
        for _ in range(self.size):
            self._work.put(None)


def _started_at(record: tuple[int, float, float, str]) -> float:
    return record[1]


def _worker(work: queue.SimpleQueue) -> None:
    while (item := work.get()) is not None:
        fn, arg = item
        fn(arg)


class _Running:
    """How many nodes, and how many wide ones, are running now (in every executor of the process), for the
    thread policies: one item per node in a list (append and pop are atomic: no lock on a node's path)."""

    def __init__(self) -> None:
        self._nodes: list[None] = []
        self._wide: list[None] = []

    def enter(self, wide: bool) -> tuple[int, int]:
        self._nodes.append(None)
        if wide:
            self._wide.append(None)
        return len(self._nodes), len(self._wide)

    def leave(self, wide: bool) -> None:
        self._nodes.pop()
        if wide:
            self._wide.pop()


_RUNNING = _Running()


class _KernelThreads(threading.local):
    """numba's thread count of this thread, as the executor last set it: numba.set_num_threads costs
    microseconds (a lock, a check of its pool), as much as a small node's kernel."""

    count = 0  # unknown

    def set(self, n: int) -> None:
        if n != self.count:
            numba.set_num_threads(n)
            self.count = n


_KERNEL_THREADS = _KernelThreads()

# Threads for a node's kernels: policy(cores, nodes running, wide nodes running, the node is wide), the
# counts including this node; numba's count is per calling thread, so each node sets its own.
KERNEL_THREADS: dict[str, Callable[[int, int, int, bool], int]] = {
    "all": lambda cores, running, wide_running, wide: cores,
    "one": lambda cores, running, wide_running, wide: 1,
    "adaptive": lambda cores, running, wide_running, wide: max(1, cores // running),
    "sized": lambda cores, running, wide_running, wide: max(1, cores // wide_running) if wide else 1,
}


# -- one run ----------------------------------------------------------------------------------------


class _Run:
    """The state of one run, shared by the threads running its nodes: the values, the pending counts,
    the readers left per value, the nodes scheduled and not done (`outstanding`), the first error."""

    def __init__(self, view: GraphView, arrays: list[np.ndarray], control: RunControl, pool: _Pool,
                 cores: int, policy: Callable[[int, int, int, bool], int]):
        self.view, self.control, self.pool, self.cores, self.policy = view, control, pool, cores, policy
        self.values: list[np.ndarray | None] = [None] * len(view.readers)
        for slot, array in zip(view.inputs, arrays):
            self.values[slot] = array
        self.pending = [n.pending for n in view.nodes]
        self.readers = list(view.readers)
        self.outstanding = len(view.roots)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.records: list[tuple[int, float, float, str]] = []  # (node, start, end, thread) of each node run
        if not view.roots:
            self.done.set()

    def process(self, first: int) -> None:
        """Run `first`, then the nodes it readies that stay on this thread, until there are none."""
        inline = deque([first])
        thread = threading.current_thread().name
        while inline:
            i = inline.popleft()
            outputs = self._run_node(i, thread) if self.error is None else None
            self._schedule(self._complete(i, outputs), inline)

    def start(self) -> None:
        """Run the roots from the calling thread, as a node finishing would have readied them."""
        inline: deque[int] = deque()
        self._schedule(list(self.view.roots), inline)
        while inline:
            self.process(inline.popleft())

    def _schedule(self, ready: list[int], inline: deque[int]) -> None:
        """executor.cc's ScheduleReady: cheap nodes stay on this thread, expensive ones go to the pool,
        but this thread keeps the last of them when it has nothing cheap to do (a chain: no hand-off)."""
        kept = None
        for i in ready:
            if not self.view.nodes[i].expensive:
                inline.append(i)
                continue
            if kept is not None:
                self.pool.submit(self.process, kept)
            kept = i
        if kept is not None:
            if inline:
                self.pool.submit(self.process, kept)
            else:
                inline.append(kept)

    def _run_node(self, i: int, thread: str) -> tuple[np.ndarray, ...] | None:
        """Node i's outputs, or None when the run stops (cancelled, past its deadline, or a node failed)."""
        view, control = self.view.nodes[i], self.control
        node = view.node
        try:
            control.check(node.name)
        except RunCancelledError as exc:
            self._fail(exc)
            return None
        args = [self.values[s] for s in view.inputs]
        _KERNEL_THREADS.set(self.policy(self.cores, *_RUNNING.enter(view.wide), view.wide))
        start = time.perf_counter()
        try:
            outputs = view.run(*args)
        except NodeExecutionError as exc:
            self._fail(exc)
            return None
        except Exception as exc:  # a kernel's error, as interpreter.run_node wraps a reference's
            error = NodeExecutionError(f"node {node.name} ({node.op}) failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            self._fail(error)
            return None
        except BaseException as exc:  # KeyboardInterrupt: the run stops as for an error, the nodes in flight end
            self._fail(exc)
            return None
        finally:
            _RUNNING.leave(view.wide)
        end = time.perf_counter()
        self.records.append((i, start, end, thread))
        if control.on_node_output is not None:
            try:
                for array in outputs:
                    control.on_node_output(node.name, array)
            except BaseException as exc:  # the caller's callback: its own error, as the interpreter lets it through
                self._fail(exc)
                return None
        return outputs

    def _complete(self, i: int, outputs: tuple[np.ndarray, ...] | None) -> list[int]:
        """Book node i as done (or dropped, when outputs is None): store its outputs, drop the values
        it was the last reader of, and return the nodes it readied (none once the run stops)."""
        view = self.view.nodes[i]
        ready = []
        with self.lock:
            if outputs is not None and self.error is None:
                values, readers = self.values, self.readers
                for slot, array in zip(view.outputs, outputs):
                    if readers[slot]:
                        values[slot] = array
                for slot in view.inputs:
                    readers[slot] -= 1
                    if not readers[slot]:
                        values[slot] = None
                for c in view.consumers:
                    self.pending[c] -= 1
                    if not self.pending[c]:
                        ready.append(c)
            self.outstanding += len(ready) - 1
            if not self.outstanding:
                self.done.set()
        return ready

    def _fail(self, error: BaseException) -> None:
        with self.lock:
            if self.error is None:
                self.error = error


# -- the model --------------------------------------------------------------------------------------


class Executor(CompiledModel):
    """compile(path, backend="executor"): see the module docstring. threads: the pool's workers and the
    most threads a node's kernels use (default: every core numba may use). policy: how many threads each
    node's kernels use (a key of KERNEL_THREADS; `policy` may change between runs). costs: which nodes
    are handed to the pool and which may use several threads."""

    backend = "executor"

    def __init__(self, graph: Graph, threads: int | None = None, policy: str = "sized",
                 costs: CostModel = CostModel()):
        super().__init__(graph)
        if policy not in KERNEL_THREADS:
            raise ValueError(f"unknown thread policy {policy!r}; choose one of {tuple(KERNEL_THREADS)}")
        self.threads = max(1, min(threads or os.cpu_count() or 1, numba.config.NUMBA_NUM_THREADS))
        self.policy = policy
        programs = build_node_programs(graph, run_node)
        self.source = programs.source
        self.interpreted = programs.interpreted  # node name -> why it runs its numpy reference (no kernel)
        self.view = GraphView.build(graph, programs, costs)
        self._pool = _Pool(self.threads)
        weakref.finalize(self, self._pool.stop)

    @property
    def ir(self) -> str:
        return print_graph(self.graph, {name: f"interpreted: {why}" for name, why in self.interpreted.items()})

    @property
    def last_step_stats(self) -> list[NodeStat]:
        """A NodeStat per node the last run ran, by start time: made when read, not during the run (one
        costs a microsecond or two, as much as a small node's kernel)."""
        last = self._last_stats
        if isinstance(last, list):  # set from outside: CompiledModel's empty list, a specialised model's stats
            return last
        nodes = self.view.nodes
        return [nodes[i].stat(start, end, thread) for i, start, end, thread in sorted(last, key=_started_at)]

    @last_step_stats.setter
    def last_step_stats(self, stats: list[NodeStat]) -> None:
        self._last_stats: list[NodeStat] | tuple[tuple[int, float, float, str], ...] = list(stats)

    def _execute(self, arrays: list[np.ndarray], control: RunControl) -> list[np.ndarray]:
        run = _Run(self.view, arrays, control, self._pool, self.threads, KERNEL_THREADS[self.policy])
        caller_threads = numba.get_num_threads()
        _KERNEL_THREADS.count = caller_threads
        try:
            run.start()
            run.done.wait()
        finally:
            _KERNEL_THREADS.set(caller_threads)  # the caller's numba code keeps its own count
            self._last_stats = tuple(run.records)  # (node, start, end, thread) of each node run
        if run.error is not None:
            run.values.clear()  # release the run's buffers before the error travels up with its traceback
            raise run.error
        return [self._output(run, v) for v in self.view.outputs]

    def _output(self, run: _Run, v: Value) -> np.ndarray:
        if v.is_constant or v.producer is None:  # a weight or an input given back: the caller's copy
            return np.array(v.data if v.is_constant else run.values[self.view.slots[v]], copy=True)
        return owned(run.values[self.view.slots[v]])
