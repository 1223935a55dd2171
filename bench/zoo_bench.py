"""The zoo benchmark: our compiled forward vs our interpreter vs torch eager vs onnxruntime vs ncnn.

    python -m bench.zoo_bench             # every model at batch 1 and 8 -> bench/results/zoo.{md,png,json}
    python -m bench.zoo_bench --quick     # mlp, transformer_block, resnet18 at batch 1 -> zoo_quick.*
    python -m bench.zoo_bench --models resnet18 --batches 1 --threads 2 --out /tmp/r   # -> zoo_partial.*

For each model and batch size: latency of the five runtimes in this process (same
input, same thread count, warm-up, median of repeated runs, the best of 3 rounds over
the runtimes, ratio to onnxruntime;
ncnn is optional, skipped with a message where it cannot be imported, and runs the
images of a batch one after another), the model's FLOPs (from our IR) and the
GFLOP/s each runtime reaches, against the machine's peak measured at the start (the
faster of a float32 GEMM through numpy's BLAS and through our own microkernel, on the
same threads),
the compile time of our compiled backend cold (empty cache) and warm (from the
cache), each in a fresh process as a user meets it, and the peak memory of each
runtime, each in its own fresh process (bench/zoo_probe.py). Outputs are also
checked against torch eager, so a fast but wrong runtime is flagged in the table.
A step that fails is recorded in the results and the run goes on.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

from bench import zoo
from bench.pnnx_export import export_zoo
from bench.runtimes import (
    NCNN_BATCH,
    as_arrays,
    export_onnx,
    measure_microkernel_gflops,
    measure_peak_gflops,
    median_ms,
    model_flops,
    ncnn_runtime,
    ncnn_unavailable,
    onnxruntime_session,
    ours,
    torch_eager,
)
from bench.zoo_report import BUSY, ROOT, RUNTIMES, ModelResult, Report, machine_info, si, write_all

FULL_MODELS = list(zoo.ZOO)  # every model of the zoo, in its order
FULL_BATCHES = [1, 8]
QUICK_MODELS = ["mlp", "transformer_block", "resnet18"]
QUICK_BATCHES = [1]
PEAK_N, PEAK_REPEAT = 2048, 5  # the peak: best of 5 float32 (2048 x 2048) @ (2048 x 2048) GEMMs, each way

T = TypeVar("T")


@dataclass(frozen=True)
class Options:
    threads: int
    repeat: int  # timed runs per runtime, at most
    max_seconds: float  # ... and at most this long (never fewer than 3 runs)
    memory: bool  # run the peak-memory probes
    ncnn: bool = True  # ncnn can be imported here
    rounds: int = 1  # timing rounds over the runtimes, each with max_seconds / rounds: the best round counts


class CpuClock:
    """How much CPU time other processes take from now on: a run reports how much it was disturbed."""

    def __init__(self) -> None:
        self.wall, self.busy, self.own = time.perf_counter(), self._busy_seconds(), self._own_seconds()

    @staticmethod
    def _busy_seconds() -> float:
        """CPU seconds all processes (and the hypervisor: steal) used since boot, from /proc/stat."""
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own_seconds() -> float:
        """CPU seconds of this process and its finished subprocesses (the probes)."""
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def others_share(self) -> float:
        """Other processes' share of all cores' time since construction, 0 to 1."""
        others = (self._busy_seconds() - self.busy) - (self._own_seconds() - self.own)
        return max(0.0, others / ((time.perf_counter() - self.wall) * (os.cpu_count() or 1)))


def attempt(errors: dict[str, str], step: str, fn: Callable[[], T]) -> T | None:
    """fn(), or None with its error recorded under `step`: one failing runtime must not end a long run."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - recorded and reported in the results
        message = str(e).strip().splitlines()
        errors[step] = f"{type(e).__name__}: {message[0] if message else ''}"[:300]
        print(f"  {step} failed: {errors[step]}", file=sys.stderr, flush=True)
        return None


def probe(*args: str) -> dict:
    """Run bench/zoo_probe.py in a fresh Python process and return the JSON it prints last."""
    done = subprocess.run([sys.executable, "-m", "bench.zoo_probe", *args], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"probe exited with {done.returncode}: {tail[0]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compile_probe(param: Path, cache_dir: Path, threads: int, expect_hit: bool) -> float:
    """Seconds of compiler.compile() in a fresh process; checks the cache did what the column claims.

    A cold compile is measured with numba's cache of our kernel library warm, as a
    user meets it after the first model: if that cache was cold (kernels changed
    since it was filled), the probe filled it, and runs again on an empty cache.
    """
    for _ in range(2):
        out = probe("compile", str(param), "--cache-dir", str(cache_dir), "--threads", str(threads))
        if out["hit"] != expect_hit:
            raise RuntimeError(f"expected a cache {'hit' if expect_hit else 'miss'}, got the opposite")
        if out["kernel_cache_misses"] == 0:
            return out["seconds"]
        print(f"  numba compiled {out['kernel_cache_misses']} kernels of the library (its cache was cold): "
              "measuring again", file=sys.stderr, flush=True)
        if not expect_hit:
            shutil.rmtree(cache_dir)
    raise RuntimeError("numba's kernel cache stays cold (is codegen/kernels/__pycache__ writable?)")


def max_error(got: object, reference: list[np.ndarray]) -> float:
    """Largest difference from torch eager's outputs, relative to their largest magnitude (at least 1)."""
    arrays = as_arrays(got)
    if [a.shape for a in arrays] != [r.shape for r in reference]:
        raise ValueError(f"output shapes {[a.shape for a in arrays]}, torch: {[r.shape for r in reference]}")
    return max(float(np.abs(a - r).max()) / max(1.0, float(np.abs(r).max())) for a, r in zip(arrays, reference))


def memory_probe(runtime: str, artifact: Path, work: Path, threads: int) -> float:
    """Peak MB of `runtime` loading `artifact` and running it on work/input.npy, in a fresh process."""
    return probe("memory", runtime, str(artifact), str(work / "input.npy"), "--cache-dir", str(work / "cache"),
                 "--threads", str(threads))["peak_mb"]


def _error_of(run: Callable[[np.ndarray], object], x: np.ndarray, reference: list[np.ndarray]) -> float:
    return max_error(run(x), reference)


def check_and_time(result: ModelResult, runs: dict[str, Callable[[np.ndarray], object]], x: np.ndarray,
                   reference: list[np.ndarray], options: Options) -> None:
    """Compare each runtime's output with torch eager's, then time them in rounds, one runtime after
    another, keeping each runtime's best round (the interpreter, slow and not what is compared, times
    in the first round only). Some machines run a process's code at two speeds, switching every few
    seconds to minutes (a 2-vCPU EPYC VM: ResNet-50 at 21 or 28 ms, whatever ran): rounds spread
    each runtime's runs over the whole measurement, so no runtime is measured only in a slow spell."""
    errors = result.errors
    for runtime, run in runs.items():
        result.max_error[runtime] = attempt(errors, f"{runtime} output", partial(_error_of, run, x, reference))
    for round_ in range(options.rounds):
        for runtime, run in runs.items():
            if (runtime == "interpreter" and round_) or f"{runtime} latency" in errors:
                continue
            # the interpreter is slow on large models, with nothing to warm
            warmup, rounds = (1, 1) if runtime == "interpreter" else (3, options.rounds)
            ms = attempt(errors, f"{runtime} latency",
                         partial(median_ms, partial(run, x), warmup, options.repeat, options.max_seconds / rounds))
            if ms is not None:
                result.latency_ms[runtime] = min(ms, result.latency_ms.get(runtime, ms))


def bench_model(name: str, batch: int, options: Options, work: Path) -> ModelResult:
    """Measure one model at one batch size; scratch files (caches, exports) go to `work`."""
    result = ModelResult(name, batch)
    errors, threads = result.errors, options.threads
    entry = zoo.get(name)
    x = zoo.make_input(entry, batch=batch)
    module = entry.build()
    param = attempt(errors, "pnnx export", lambda: export_zoo(name, batch=batch))
    onnx = attempt(errors, "onnx export", lambda: export_onnx(module, x, work / f"{name}.onnx"))
    if param is not None:
        result.flops = attempt(errors, "flops", lambda: model_flops(param))

    cache = work / "cache"
    if param is not None:
        result.compile_cold_s = attempt(errors, "compile cold", lambda: compile_probe(param, cache, threads, False))
        result.compile_warm_s = attempt(errors, "compile warm", lambda: compile_probe(param, cache, threads, True))
    compiled = attempt(errors, "compiled", lambda: ours(name, batch, "numba", threads, cache_dir=cache)[0])
    interpreted = attempt(errors, "interpreter", lambda: ours(name, batch, "interpreter", threads)[0])
    session = attempt(errors, "onnxruntime", lambda: onnxruntime_session(name, batch, threads, onnx)) if onnx else None
    ncnn = attempt(errors, "ncnn", lambda: ncnn_runtime(name, threads)) if options.ncnn else None
    runs: dict[str, Callable[[np.ndarray], object] | None] = {
        "compiled": compiled, "interpreter": interpreted, "torch": torch_eager(name, threads, module),
        "onnxruntime": session, "ncnn": ncnn,
    }

    reference = as_arrays(runs["torch"](x))
    check_and_time(result, {runtime: run for runtime, run in runs.items() if run is not None}, x, reference, options)
    del runs, compiled, interpreted, session, ncnn
    gc.collect()

    if options.memory:
        np.save(work / "input.npy", x)
        torch.save(module, work / "module.pt")
        artifacts = {"compiled": param, "interpreter": param, "torch": work / "module.pt", "onnxruntime": onnx}
        for runtime, artifact in artifacts.items():
            if artifact is not None:
                result.peak_mb[runtime] = attempt(errors, f"{runtime} memory",
                                                  partial(memory_probe, runtime, artifact, work, threads))
    return result


def summary(result: ModelResult, peak_gflops: float | None) -> str:
    """One progress line: the latencies, compiled GFLOP/s and compile times of one model and batch."""
    parts = [f"{rt} {ms:.3g} ms" for rt in RUNTIMES if (ms := result.latency_ms.get(rt)) is not None]
    if (rate := result.gflops("compiled")) is not None:
        share = f" ({rate / peak_gflops:.0%} of peak)" if peak_gflops else ""
        parts.append(f"{si(result.flops)}FLOP, compiled {rate:.3g} GFLOP/s{share}")
    if result.compile_cold_s is not None and result.compile_warm_s is not None:
        parts.append(f"compile cold {result.compile_cold_s:.1f} s, warm {result.compile_warm_s:.2f} s")
    disturbed = f", other processes used {result.others_cpu:.0%} of the CPU" if result.others_cpu > BUSY else ""
    return f"{result.model} batch {result.batch} ({result.seconds:.0f} s{disturbed}): {', '.join(parts)}"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"development mode: {', '.join(QUICK_MODELS)} at batch 1, at most 10 runs or 2 s "
                             "per runtime, no peak-memory probes; about a minute, under 2 once the pnnx exports "
                             "and numba's kernel cache are warm (a first run fills them). Writes zoo_quick.*")
    parser.add_argument("--models", nargs="+", choices=sorted(zoo.ZOO), metavar="MODEL",
                        help=f"default: {' '.join(FULL_MODELS)}; any of {', '.join(sorted(zoo.ZOO))}")
    parser.add_argument("--batches", nargs="+", type=int, help="default: 1 8")
    parser.add_argument("--threads", type=int, default=2, help="threads of every runtime (default 2)")
    parser.add_argument("--repeat", type=int, help="timed runs per runtime, at most (default 50, quick 10)")
    parser.add_argument("--max-seconds", type=float,
                        help="time per runtime's timed runs, at most; never fewer than 3 (default 10, quick 2)")
    parser.add_argument("--rounds", type=int,
                        help="timing rounds over the runtimes, each runtime's best kept; --max-seconds is split "
                             "between them (default 3, quick 1)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory probes (quick: skipped)")
    parser.add_argument("--no-ncnn", action="store_true",
                        help="skip ncnn (skipped anyway, with a message, where the ncnn package cannot be imported)")
    parser.add_argument("--peak-size", type=int, default=PEAK_N, metavar="N",
                        help=f"the peak: the best of {PEAK_REPEAT} float32 NxN GEMMs through numpy's BLAS or through "
                             f"our microkernel, whichever is faster (default {PEAK_N}); "
                             "0 skips it")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="default: bench/results")
    args = parser.parse_args(argv)

    models = args.models or (QUICK_MODELS if args.quick else FULL_MODELS)
    batches = args.batches or (QUICK_BATCHES if args.quick else FULL_BATCHES)
    ncnn_reason = "--no-ncnn" if args.no_ncnn else ncnn_unavailable()
    if ncnn_reason is not None:
        print(f"ncnn: skipped ({ncnn_reason})", file=sys.stderr, flush=True)
    options = Options(threads=args.threads, repeat=args.repeat or (10 if args.quick else 50),
                      max_seconds=args.max_seconds or (2.0 if args.quick else 10.0),
                      memory=not (args.no_memory or args.quick), ncnn=ncnn_reason is None,
                      rounds=max(1, args.rounds or (1 if args.quick else 3)))
    stem = "zoo_quick" if args.quick else "zoo" if (models, batches) == (FULL_MODELS, FULL_BATCHES) else "zoo_partial"

    before = CpuClock()
    time.sleep(1.0)
    if (share := before.others_share()) > BUSY:
        print(f"warning: other processes are using {share:.0%} of the CPU; the latencies will be disturbed",
              file=sys.stderr)
    machine, peak, extra = machine_info(args.threads), None, {}
    if ncnn_reason is not None:
        extra["ncnn_skipped"] = ncnn_reason
    if args.peak_size > 0:  # the better of numpy's BLAS and our microkernel on the same product
        blas = measure_peak_gflops(args.threads, args.peak_size, PEAK_REPEAT)
        ours = measure_microkernel_gflops(args.threads, args.peak_size, PEAK_REPEAT)
        peak = max(blas, ours)
        extra["peak"] = (f"float32 {args.peak_size}x{args.peak_size} GEMM, best of {PEAK_REPEAT}, {args.threads} "
                         f"threads: numpy's BLAS {blas:.0f} GFLOP/s, our microkernel (linear_packed) {ours:.0f}")
    print(f"machine: {machine['cpu']}, {machine['cpus']} CPUs, {machine['isa']}; "
          + (f"measured peak {peak:.1f} GFLOP/s ({extra['peak']})" if peak else "peak not measured"), flush=True)
    if options.ncnn:
        print(f"ncnn {machine['ncnn']}: {NCNN_BATCH}", flush=True)
    clock = CpuClock()
    results = []
    for name in models:
        for batch in batches:
            model_clock = CpuClock()
            with tempfile.TemporaryDirectory(prefix=f"zoo_bench_{name}_b{batch}_") as work:
                results.append(bench_model(name, batch, options, Path(work)))
            results[-1].seconds = time.perf_counter() - model_clock.wall
            results[-1].others_cpu = model_clock.others_share()
            print(summary(results[-1], peak), flush=True)
    command = shlex.join(["python", "-m", "bench.zoo_bench", *argv])
    report = Report(results, {**machine_info(args.threads), **extra}, command, time.perf_counter() - clock.wall,
                    clock.others_share(), peak)
    for path in write_all(report, args.out / stem):
        print(f"wrote {path}")
    print(f"total {report.duration_s:.0f} s")


if __name__ == "__main__":
    main()
