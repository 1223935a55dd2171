"""Results of the zoo benchmark and how they are written: markdown tables, a PNG chart, JSON.

Kept apart from the measuring (bench/zoo_bench.py) so the writers can be tested on
made-up results in a second, and so that re-rendering never needs a re-run:

    python -m bench.zoo_report bench/results/zoo.json     # rewrites zoo.md and zoo.png beside it
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

RUNTIMES = ("compiled", "interpreter", "torch", "onnxruntime", "ncnn")
LABELS = {"compiled": "compiled (numba)", "interpreter": "interpreter", "torch": "torch eager",
          "onnxruntime": "onnxruntime", "ncnn": "ncnn"}
# The runtimes whose peak memory bench/zoo_probe.py measures (it has no ncnn loader).
MEMORY_RUNTIMES = ("compiled", "interpreter", "torch", "onnxruntime")
REFERENCE = "onnxruntime"
# An output further than this from torch eager's (relative to its largest magnitude) is flagged: a
# check that a runtime computes the same function, not a precision test (tests/test_zoo.py is). Float32
# runtimes legitimately differ by 1e-3 of the output's scale on YOLOv5's box decode.
TOLERANCE = 1e-2
# Other processes' CPU share that makes numbers suspect: with 2 threads on 2 cores, one busy neighbour makes
# every runtime's thread barriers wait for a descheduled thread, and latencies grow tenfold.
BUSY = 0.05
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ModelResult:
    """Everything measured for one model at one batch size; None where a step failed or did not run."""

    model: str
    batch: int
    flops: int | None = None  # of one forward at this batch: 2 per multiply-add of conv/linear/matmul
    latency_ms: dict[str, float | None] = field(default_factory=dict)  # median (of the best round), by runtime
    compile_cold_s: float | None = None
    compile_warm_s: float | None = None
    peak_mb: dict[str, float | None] = field(default_factory=dict)  # by runtime
    max_error: dict[str, float | None] = field(default_factory=dict)  # vs torch eager, by runtime
    errors: dict[str, str] = field(default_factory=dict)  # step -> one-line error
    seconds: float = 0.0  # how long measuring all of this took
    others_cpu: float = 0.0  # share of the machine's CPU time other processes used meanwhile

    def ratio(self, runtime: str) -> float | None:
        """Latency relative to onnxruntime: above 1 is slower than onnxruntime."""
        ms, ref = self.latency_ms.get(runtime), self.latency_ms.get(REFERENCE)
        return ms / ref if ms is not None and ref else None

    def gflops(self, runtime: str) -> float | None:
        """GFLOP/s `runtime` reaches: the model's FLOPs over its median latency."""
        ms = self.latency_ms.get(runtime)
        return self.flops / ms / 1e6 if self.flops and ms else None


@dataclass
class Report:
    results: list[ModelResult]
    machine: dict[str, str]  # cpu, cpus, isa, threads, versions, date, commit, how the peak was measured
    command: str
    duration_s: float
    others_cpu: float  # share of the machine's CPU time other processes used during the run
    peak_gflops: float | None = None  # the machine's measured float32 GEMM rate (machine["peak"] says how)

    def peak_share(self, result: ModelResult, runtime: str = "compiled") -> float | None:
        """`runtime`'s GFLOP/s on `result` as a share of the machine's peak."""
        rate = result.gflops(runtime)
        return rate / self.peak_gflops if rate is not None and self.peak_gflops else None


def machine_info(threads: int) -> dict[str, str]:
    """The machine and software the numbers belong to."""
    from bench.runtimes import cpu_name, isa, ncnn_version

    versions = {name: importlib.metadata.version(name) for name in ("numpy", "numba", "torch", "onnxruntime")}
    versions["ncnn"] = ncnn_version()
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"cpu": cpu_name(), "cpus": str(os.cpu_count()), "isa": isa(), "threads": str(threads),
            "python": platform.python_version(), **versions, "commit": commit or "unknown",
            "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")}


def _num(value: float) -> str:
    """Three significant digits or more, never exponent notation: 1234, 123, 12.3, 1.23, 0.012."""
    for bound, digits in ((100, 0), (10, 1), (1, 2)):
        if value >= bound:
            return f"{value:.{digits}f}"
    return f"{value:.3f}"


def si(value: float) -> str:
    """A count with an SI prefix, three significant digits: 51.7 k, 2.36 M, 16.5 G."""
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{_num(value / scale)} {prefix}"
    return f"{value:.0f}"


def _cell(value: float | None, fmt: Callable[[float], str]) -> str:
    return "—" if value is None else fmt(value)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def machine_line(report: Report) -> str:
    """The command, the machine (with its ISA and measured peak) and the software the numbers belong to."""
    m = report.machine
    isa = f", {m['isa']}" if m.get("isa") else ""
    ncnn = m.get("ncnn", "not recorded") + (" (skipped)" if m.get("ncnn_skipped") else "")
    peak = ""
    if report.peak_gflops:
        how = f" ({m['peak']})" if m.get("peak") else ""
        peak = f"; measured peak {_num(report.peak_gflops)} GFLOP/s{how}"
    return (f"`{report.command}` on {m['cpu']} ({m['cpus']} CPUs{isa}), {m['threads']} threads per runtime{peak}; "
            f"Python {m['python']}, numpy {m['numpy']}, numba {m['numba']}, torch {m['torch']}, "
            f"onnxruntime {m['onnxruntime']}, ncnn {ncnn}; commit {m['commit']}; "
            f"{m['date']}; the run took {_duration(report.duration_s)}, other processes used "
            f"{report.others_cpu:.0%} of the CPU.")


def render_markdown(report: Report) -> str:
    lines = [
        "# Zoo benchmark",
        "",
        machine_line(report),
        "",
        "## Latency",
        "",
        "Median milliseconds per forward pass, and the ratio to onnxruntime (below 1: faster than onnxruntime).",
        "",
        "| model | batch | " + " | ".join(f"{LABELS[r]} ms" for r in RUNTIMES) + " | "
        + " | ".join(f"{LABELS[r]} / ort" for r in RUNTIMES if r != REFERENCE) + " |",
        "|---|--:|" + "--:|" * (2 * len(RUNTIMES) - 1),
    ]
    flagged = any_disturbed = False
    for r in report.results:
        cells = []
        for runtime in RUNTIMES:
            cell = _cell(r.latency_ms.get(runtime), _num)
            error = r.max_error.get(runtime)
            if error is not None and error > TOLERANCE:
                cell += " †"
                flagged = True
            cells.append(cell)
        cells += [_cell(r.ratio(rt), lambda v: f"{_num(v)}x") for rt in RUNTIMES if rt != REFERENCE]
        disturbed = r.others_cpu > BUSY
        lines.append(f"| {r.model}{' *' if disturbed else ''} | {r.batch} | " + " | ".join(cells) + " |")
        any_disturbed |= disturbed
    lines += [
        "",
        "## Compile time and peak memory",
        "",
        "| model | batch | compile cold s | compile warm s | "
        + " | ".join(f"{LABELS[r]} MB" for r in MEMORY_RUNTIMES) + " |",
        "|---|--:|--:|--:|" + "--:|" * len(MEMORY_RUNTIMES),
    ]
    for r in report.results:
        cells = [_cell(r.compile_cold_s, lambda v: f"{v:.1f}"), _cell(r.compile_warm_s, lambda v: f"{v:.2f}")]
        cells += [_cell(r.peak_mb.get(rt), lambda v: f"{v:.0f}") for rt in MEMORY_RUNTIMES]
        lines.append(f"| {r.model} | {r.batch} | " + " | ".join(cells) + " |")
    peak = f"{_num(report.peak_gflops)} GFLOP/s" if report.peak_gflops else "not measured"
    lines += [
        "",
        "## Throughput",
        "",
        "FLOPs of one forward pass (2 per multiply-add of the conv, linear and matmul ops in our IR) and the "
        f"GFLOP/s each runtime reaches (FLOPs / median latency); % of peak: of the machine's measured peak ({peak}).",
        "",
        f"| model | batch | FLOPs | {LABELS['compiled']} GFLOP/s | {LABELS['compiled']} % of peak | "
        + " | ".join(f"{LABELS[r]} GFLOP/s" for r in RUNTIMES if r != "compiled") + " |",
        "|---|--:|" + "--:|" * (len(RUNTIMES) + 2),
    ]
    for r in report.results:
        cells = [_cell(r.flops, si), _cell(r.gflops("compiled"), _num),
                 _cell(report.peak_share(r), lambda v: f"{v:.0%}")]
        cells += [_cell(r.gflops(rt), _num) for rt in RUNTIMES if rt != "compiled"]
        lines.append(f"| {r.model} | {r.batch} | " + " | ".join(cells) + " |")
    lines += ["", "Notes:", ""] + [f"- {note}" for note in NOTES]
    if flagged:
        lines.append(f"- †: the output differs from torch eager's by more than {TOLERANCE:g} "
                     "(relative to its largest magnitude); see `max_error` in the JSON.")
    if report.machine.get("ncnn_skipped"):
        lines.append(f"- ncnn was skipped: {report.machine['ncnn_skipped']}.")
    if any_disturbed:
        lines.append(f"- *: other processes used more than {BUSY:.0%} of the CPU while this row was measured; "
                     "its latencies are not to be trusted (`others_cpu` in the JSON).")
    failures = [f"{r.model} batch {r.batch}, {step}: {error}" for r in report.results
                for step, error in r.errors.items()]
    if failures:
        lines += ["", "Failures:", ""] + [f"- {f}" for f in failures]
    return "\n".join(lines) + "\n"


NOTES = (
    "All five runtimes run in one process with the same thread count, each on the same input: "
    "warm-up runs, then the median of repeated runs (repetitions are capped by time, so the "
    "interpreter on large models has fewer), in rounds over the runtimes (3 by default; the "
    "interpreter in the first only), each runtime's best round kept, so that no runtime is measured "
    "only during one of the slow spells some virtual machines go through. onnxruntime runs the torch "
    "model exported with `torch.onnx.export` (CPU provider); torch eager runs under `torch.no_grad()`.",
    "ncnn runs the model as pnnx converts it to ncnn (float32 weights), on the CPU with "
    "`net.opt.num_threads` threads and float32 storage and arithmetic (its float16/bfloat16 options "
    "off; packing layouts, Winograd and sgemm convolutions on). Its Python API takes one image without "
    "a batch dim: at batch > 1 the images run one after another (a new extractor each) and the "
    "outputs are stacked, so its batch-8 time is eight batch-1 runs. Its peak memory is not probed. "
    "Where the `ncnn` package cannot be imported its columns are empty and the run says so.",
    "FLOPs: counted from our IR as lowered from the pnnx model (before any pass): 2 per "
    "multiply-add of conv2d, conv_transpose2d, linear and matmul; biases, normalisations, "
    "activations, pooling and the rest count nothing. Peak: the best of a few float32 GEMMs of "
    "the size the header names on the benchmark's thread count, through numpy's BLAS and through our "
    "own microkernel, whichever is faster (the header gives both); the rate a well-blocked sgemm "
    "reaches on these cores, not the chip's theoretical peak.",
    "Compile cold: `compiler.compile()` in a fresh process with an empty cache directory (passes, "
    "code generation, numba's JIT of the forward); numba's cache of our kernel library "
    "(`codegen/kernels/__pycache__`) is warm, as it is after the first use of the package (when it "
    "was cold, the benchmark filled it and measured again). "
    "Compile warm: the same call again in another fresh process, loading from that cache. "
    "Neither includes `import compiler` (about half a second).",
    "Peak memory: each runtime in its own fresh process loads the model and runs it twice; the "
    "number is the peak resident set during that minus the resident set just before it (after the "
    "imports; the high-water mark is reset there through `/proc/self/clear_refs`), so native "
    "allocations count and the libraries do not. Compiled: loaded from the warm cache (the JIT's "
    "own memory is not counted), including the machine code of our kernel library that numba loads, "
    "a cost per process rather than per model (the small models show its size); torch: the module "
    "unpickled with `torch.load`; onnxruntime: session creation and runs.",
    "—: not measured (quick mode skips peak memory) or failed (see Failures).",
)


def write_chart(report: Report, path: Path) -> None:
    """Grouped bars: each runtime's latency ratio to onnxruntime per model and batch, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = [r for r in RUNTIMES if r != REFERENCE]
    width = 0.8 / len(others)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(report.results) + 2), 5.0))
    for i, runtime in enumerate(others):
        xs, ys = [], []
        for j, result in enumerate(report.results):
            ratio = result.ratio(runtime)
            if ratio is not None:
                xs.append(j + (i - (len(others) - 1) / 2) * width)
                ys.append(ratio)
        bars = ax.bar(xs, ys, width, label=LABELS[runtime])
        ax.bar_label(bars, labels=[_num(y) for y in ys], fontsize=7, padding=1)
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="onnxruntime = 1")
    ax.set_yscale("log")
    ax.set_xticks(range(len(report.results)), [f"{r.model}\nbatch {r.batch}" for r in report.results], fontsize=8)
    ax.set_ylabel("latency / onnxruntime latency (lower is faster)")
    m = report.machine
    ax.set_title(f"Latency relative to onnxruntime, {m['threads']} threads, {m['cpu']}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_all(report: Report, stem: Path) -> list[Path]:
    """stem.md, stem.png and stem.json; return their paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    md, png, js = stem.with_suffix(".md"), stem.with_suffix(".png"), stem.with_suffix(".json")
    md.write_text(render_markdown(report))
    write_chart(report, png)
    js.write_text(json.dumps(dataclasses.asdict(report), indent=1) + "\n")
    return [md, png, js]


def load(path: Path) -> Report:
    data = json.loads(path.read_text())
    data["results"] = [ModelResult(**r) for r in data["results"]]
    return Report(**data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", type=Path, help="a zoo.json written by bench.zoo_bench")
    args = parser.parse_args()
    for path in write_all(load(args.json), args.json.with_suffix("")):
        print(path)


if __name__ == "__main__":
    main()
