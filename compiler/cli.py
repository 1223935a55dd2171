"""Command line: python -m compiler <command> ... (also installed as `pnnx-jit`).

    run [MODEL] [--input x.npy ...] [--output-dir DIR]   compile and run (default: the shipped demo model)
    compile MODEL                                        compile into the cache and say where
    bench MODEL [--threads N] [--iterations N]           latency percentiles, throughput, vs the interpreter
    profile MODEL [--backend B] [--trace out.json]       time per node (per kernel: numba), Chrome trace
    show MODEL [--after PASS] [--dot out.dot]            print the IR, or write Graphviz DOT
    warmup                                               compile the kernel library for this CPU, once
    cache list|info|prune|clear                          the AOT cache (sizes, last use, LRU eviction)

Errors print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np

import compiler
from compiler.api import BACKENDS, load_graph, model_paths, optimize
from ir.errors import CompilerError, InputError


def shipped_model() -> Path:
    """The demo model inside the package (tiny_cnn, converted by pnnx)."""
    return Path(str(resources.files("compiler") / "data" / "tiny_cnn.pnnx.param"))


def load_input_files(paths: Sequence[str]) -> list[np.ndarray]:
    arrays = []
    for path in paths:
        try:
            arrays.append(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read input file {path}: {exc}") from None
    return arrays


def random_inputs(model: compiler.CompiledModel, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(spec.shape).astype(spec.dtype) for spec in model.inputs]


def compile_with_progress(path: Path, show: bool = True, **options) -> compiler.CompiledModel:
    """compile() with a progress bar over its steps (passes, code generation, JIT)."""
    from tqdm import tqdm

    bar = tqdm(desc="compile", unit=" step", leave=False, disable=not show or not sys.stderr.isatty())

    def step(name: str) -> None:
        bar.set_postfix_str(name)
        bar.update()

    try:
        return compiler.compile(path, on_step=step, **options)
    finally:
        bar.close()


# -- commands ----------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    path = Path(args.model) if args.model else shipped_model()
    model = compile_with_progress(path, backend=args.backend)
    arrays = load_input_files(args.input) if args.input else random_inputs(model)
    outputs = model(*arrays)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    print(f"model: {path} (backend {args.backend})")
    for spec, array in zip(model.inputs, arrays):
        print(f"input  {spec.name}: shape {array.shape} {array.dtype}")
    for spec, array in zip(model.outputs, outputs):
        head = np.array2string(array.reshape(-1)[:5], precision=5, separator=", ")
        print(f"output {spec.name}: shape {array.shape} {array.dtype} first values {head}")
    if args.output_dir:
        out_dir = Path(args.output_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for spec, array in zip(model.outputs, outputs):
            np.save(out_dir / f"{spec.name}.npy", array)
        print(f"saved {len(outputs)} output(s) to {out_dir}")
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    model = compile_with_progress(Path(args.model), cache_dir=args.cache_dir, threads=args.threads)
    info = model.cache_info
    state = "loaded from cache" if info.hit else "compiled"
    print(f"{state} in {time.perf_counter() - start:.2f} s: {info.path or '(not cached: ' + info.reason + ')'}")
    print(f"key {info.key}; {model.memory_plan.summary()}")
    return 0


def _percentiles(times: list[float]) -> dict[str, float]:
    ms = np.array(times) * 1e3
    return {"median": float(np.median(ms)), "p90": float(np.percentile(ms, 90)), "p99": float(np.percentile(ms, 99))}


def _time_runs(model: compiler.CompiledModel, arrays: list[np.ndarray], iterations: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        model(*arrays)
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        model(*arrays)
        times.append(time.perf_counter() - start)
    return times


def cmd_bench(args: argparse.Namespace) -> int:
    path = Path(args.model)
    compiled = compile_with_progress(path, threads=args.threads)
    arrays = random_inputs(compiled)
    batch = arrays[0].shape[0] if arrays and arrays[0].ndim else 1
    rows = {"compiled (numba)": _percentiles(_time_runs(compiled, arrays, args.iterations, args.warmup))}
    if not args.no_interpreter:
        interpreted = compiler.compile(path, backend="interpreter")
        rows["interpreter"] = _percentiles(_time_runs(interpreted, arrays, max(3, args.iterations // 5), 1))
    print(f"{path.name}: batch {batch}, {args.threads or 'default'} threads, {args.iterations} iterations")
    print(f"{'runtime':<18}{'median ms':>10}{'p90 ms':>9}{'p99 ms':>9}{'items/s':>10}")
    for name, r in rows.items():
        print(f"{name:<18}{r['median']:>10.3f}{r['p90']:>9.3f}{r['p99']:>9.3f}{1e3 * batch / r['median']:>10.1f}")
    if "interpreter" in rows:
        print(f"compiled is {rows['interpreter']['median'] / rows['compiled (numba)']['median']:.1f}x faster "
              f"than the interpreter")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    """Per-node times of any backend, from its step stats (compiler/step_stats.py): the numba backend's
    timed forward (a clock reading after each kernel), the executor's and the interpreter's nodes."""
    model = compile_with_progress(Path(args.model), backend=args.backend, profile=True, threads=args.threads)
    arrays = random_inputs(model)
    model(*arrays)  # warm-up: numba's first call of the timed forward, the executor's kernels loading
    runs = []
    for _ in range(args.iterations):
        model(*arrays)
        runs.append(model.last_step_stats)
    median = {t.node: float(np.median([run[i].seconds for run in runs])) * 1e3 for i, t in enumerate(runs[0])}
    wall = float(np.median([max(s.end for s in run) - min(s.start for s in run) for run in runs])) * 1e3
    total = sum(median.values())
    threads = len({s.thread for s in runs[-1]})
    print(f"{args.model}: backend {args.backend}, {len(runs[0])} nodes, median of {len(runs)} runs")
    print(f"{'node':<40}{'op':<24}{'ms':>9}{'%':>7}")
    for t in sorted(runs[0], key=lambda t: -median[t.node]):
        print(f"{t.node[:39]:<40}{t.op[:23]:<24}{median[t.node]:>9.3f}{100 * median[t.node] / total:>6.1f}%")
    print(f"{'nodes (sum)':<64}{total:>9.3f}")
    print(f"{'run (first start to last end)':<64}{wall:>9.3f}  on {threads} thread(s)")
    if args.trace:
        from compiler.step_stats import write_chrome_trace

        write_chrome_trace(runs[-1], args.trace, process=f"pnnx-jit {args.backend}")
        print(f"wrote Chrome trace to {args.trace} (open in chrome://tracing or ui.perfetto.dev)")
    return 0


def to_dot(graph) -> str:
    lines = [f'digraph "{graph.name}" {{', "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
    for v in graph.inputs:
        lines.append(f'  "{v.name}" [shape=ellipse, label="{v.name}\\n{v.type}"];')
    for n in graph.nodes:
        lines.append(f'  "{n.name}" [label="{n.op}\\n{n.name}"];')
        for v in n.inputs:
            if v.producer is not None:
                lines.append(f'  "{v.producer.name}" -> "{n.name}" [label="{v.type}"];')
            elif not v.is_constant:
                lines.append(f'  "{v.name}" -> "{n.name}";')
    for i, v in enumerate(graph.outputs):
        lines.append(f'  "output {i}" [shape=ellipse, label="{v.name}\\n{v.type}"];')
        lines.append(f'  "{v.producer.name if v.producer else v.name}" -> "output {i}";')
    return "\n".join(lines + ["}"]) + "\n"


def cmd_show(args: argparse.Namespace) -> int:
    param, _ = model_paths(args.model)
    graph = load_graph(param)
    if args.after and args.after != "lowering":
        try:
            graph = optimize(graph, stop_after=args.after)
        except ValueError as exc:
            raise CompilerError(str(exc)) from None
    if args.dot:
        Path(args.dot).write_text(to_dot(graph))
        print(f"wrote {args.dot} ({len(graph.nodes)} nodes)")
    else:
        from codegen.emit import emit_rule
        from ir.printer import print_graph

        no_kernel = {n.name: "interpreted on the numba backend: no kernel" for n in graph.nodes
                     if emit_rule(n.op) is None and n.op != "expression"}  # lower-expressions expands those
        print(print_graph(graph, no_kernel), end="")
    return 0


def cmd_warmup(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from compiler.warmup import warmup, warmup_graphs

    with tqdm(total=len(warmup_graphs()), desc="warmup", unit=" graph", disable=not sys.stderr.isatty()) as bar:
        def step(name: str) -> None:
            bar.set_postfix_str(name)
            bar.update()

        report = warmup(on_graph=step)
    print(f"the kernel library is compiled for this CPU ({report.graphs} graphs' kernels: {report.kernels} "
          f"compiled now, the others were cached; {report.seconds:.1f} s); "
          f"numba caches it beside the package's kernels")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from compiler.cache import ModelCache

    store = ModelCache(Path(args.cache_dir) if args.cache_dir else None)
    if args.action == "clear":
        print(f"removed {store.clear()} entries from {store.root}")
        return 0
    if args.action == "prune":
        removed = store.evict(max_bytes=args.max_bytes)
        print(f"removed {len(removed)} entries; {store.root} takes {store.disk_bytes() / (1 << 20):.1f} MiB "
              f"(limit {(args.max_bytes if args.max_bytes is not None else store.max_bytes) / (1 << 20):.0f} MiB)")
        return 0
    entries = store.entries()
    if args.action == "info":
        print(f"cache directory: {store.root}\nentries: {len(entries)}\n"
              f"size on disk: {store.disk_bytes() / (1 << 20):.1f} MiB (shared weights counted once; "
              f"limit {store.max_bytes / (1 << 20):.0f} MiB, $PNNX_JIT_CACHE_MAX_BYTES)")
        return 0
    print(f"{'key':<34}{'model':<24}{'MiB':>9}  {'last used':<20}built in")
    for e in sorted(entries, key=lambda e: -e.last_used):
        name = e.meta.get("graph", "?") if e.meta else "(incomplete)"
        built = f"{e.meta['build_seconds']:.1f} s" if e.meta else "-"
        used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.last_used))
        print(f"{e.key:<34}{name[:23]:<24}{e.size / (1 << 20):>9.1f}  {used:<20}{built}")
    if not entries:
        print(f"no entries in {store.root}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m compiler", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="compile and run a model (default: the shipped demo model)")
    run.add_argument("model", nargs="?", help="path to MODEL.pnnx.param (.pnnx.bin beside it)")
    run.add_argument("--input", action="append", default=[], metavar="FILE.npy", help="one per model input, in order")
    run.add_argument("--output-dir", help="save each output as <name>.npy here")
    run.add_argument("--backend", choices=BACKENDS, default="numba")
    run.set_defaults(func=cmd_run)

    comp = sub.add_parser("compile", help="compile a model into the cache and print where")
    comp.add_argument("model")
    comp.add_argument("--cache-dir")
    comp.add_argument("--threads", type=int)
    comp.set_defaults(func=cmd_compile)

    bench = sub.add_parser("bench", help="latency percentiles and throughput of the compiled model")
    bench.add_argument("model")
    bench.add_argument("--threads", type=int)
    bench.add_argument("--iterations", type=int, default=50)
    bench.add_argument("--warmup", type=int, default=5)
    bench.add_argument("--no-interpreter", action="store_true", help="skip the interpreter comparison")
    bench.set_defaults(func=cmd_bench)

    prof = sub.add_parser("profile", help="time per node (per kernel for numba), Chrome trace")
    prof.add_argument("model")
    prof.add_argument("--backend", choices=BACKENDS, default="numba")
    prof.add_argument("--threads", type=int)
    prof.add_argument("--iterations", type=int, default=5)
    prof.add_argument("--trace", metavar="OUT.json", help="also write a Chrome trace of the last run")
    prof.set_defaults(func=cmd_profile)

    show = sub.add_parser("show", help="print the IR (after lowering, or after a pass) or write Graphviz DOT")
    show.add_argument("model")
    show.add_argument("--after", metavar="PASS", help="a pass name, e.g. fuse-conv-epilogue (default: lowering)")
    show.add_argument("--dot", metavar="OUT.dot")
    show.set_defaults(func=cmd_show)

    warm = sub.add_parser("warmup", help="compile the kernel library for this CPU now (images, cluster nodes)")
    warm.set_defaults(func=cmd_warmup)

    cache = sub.add_parser("cache", help="list (sizes, last use), describe, prune or clear the AOT cache")
    cache.add_argument("action", choices=["list", "info", "prune", "clear"])
    cache.add_argument("--cache-dir")
    cache.add_argument("--max-bytes", type=int, help="prune: evict least recently used entries down to this size")
    cache.set_defaults(func=cmd_cache)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # what takes long once per machine (numba compiling a kernel of the library) says so, on stderr
    logging.basicConfig(format="%(message)s", stream=sys.stderr)
    logging.getLogger("codegen").setLevel(logging.INFO)
    try:
        return args.func(args)
    except CompilerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
