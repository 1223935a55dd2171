"""Our compiled forward against onnxruntime, conv by conv, in one process.

    python -m bench.node_compare --model inception_v3_mini [--batch 1] [--threads 2] [--rounds 8] [--top 25]

Both runtimes run in alternating rounds (a pause before each, so the other's threads stop spinning), each
twice: plain, for the forward's real time, and profiled (our `profile=True`, onnxruntime's profiler), for
the time of each node. A profiler adds time to each node: onnxruntime's ~4 us a node on a 2-core Zen 3
against a forward of ~60 nodes, ours next to nothing at one thread. So each runtime's overhead a node is
estimated from the same rounds ((sum of its nodes' medians - its plain forward's median) / nodes) and taken
off its nodes' times before they are compared. The estimate is an average: onnxruntime's profiler costs
more on some nodes than others (at 2 threads its small convs can come out faster than the machine's peak
allows), so read a row's sign and size against its neighbours, not to the microsecond. Convs are
matched by batch, output size and weight shape (in order where several match); a row is ours -
onnxruntime's, largest first.

The VM this was written on changed speed by a third within minutes, so runs in different processes do not
compare; within one run they do.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import compiler
from bench import zoo
from bench.pnnx_export import export_zoo
from bench.runtimes import SETTLE_SECONDS, cpu_name, export_onnx, isa, onnxruntime_inference_session


@dataclass
class NodeTimes:
    """A runtime's forward time (median, ms) and its convs' times (ms, its profiler's overhead taken off)."""

    forward_ms: float
    overhead_ms: float  # the profiler's estimated time a node
    convs: list[tuple[str, tuple, float]]  # (node, match key, ms as profiled, the overhead not taken off)


def _timed(fn, runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) / runs * 1e3


def _conv_key(batch: int, out_hw: tuple[int, int], weight: tuple[int, ...]) -> tuple:
    return (batch, *out_hw, *weight)


def _ours_convs(model, stats: list, forward_ms: float) -> NodeTimes:
    nodes = {n.name: n for n in model.graph.nodes}
    medians = [(s.node, statistics.median(r[i].seconds for r in stats) * 1e3) for i, s in enumerate(stats[0])]
    overhead = max(0.0, (sum(ms for _, ms in medians) - forward_ms) / len(medians))
    convs = []
    for name, ms in medians:
        node = nodes.get(name)
        if node is None or "conv" not in node.op or len(node.inputs) < 2 or not node.inputs[1].shape:
            continue
        y = node.outputs[0].shape
        convs.append((name, _conv_key(y[0], (y[2], y[3]), tuple(node.inputs[1].shape)), ms))
    return NodeTimes(forward_ms, overhead, convs)


def _ort_convs(profile_file: str, forward_ms: float, skip: int) -> NodeTimes:
    per, kinds, keys = collections.defaultdict(list), {}, {}
    for event in json.loads(Path(profile_file).read_text()):
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        name, args = event["name"], event.get("args", {})
        per[name].append(event["dur"] / 1e3)
        kinds[name] = args.get("op_name")
        try:
            out = next(iter(args["output_type_shape"][0].values()))
            weight = next(iter(args["input_type_shape"][1].values()))
            keys[name] = _conv_key(out[0], (out[2], out[3]), tuple(weight))
        except (KeyError, IndexError, StopIteration, TypeError):
            pass
    medians = {name: statistics.median(d[skip:] or d) for name, d in per.items()}
    overhead = max(0.0, (sum(medians.values()) - forward_ms) / max(1, len(medians)))
    convs = [(name, keys.get(name), ms) for name, ms in medians.items() if kinds[name] == "Conv"]
    return NodeTimes(forward_ms, overhead, convs)


def compare(model_name: str, batch: int, threads: int, rounds: int, runs: int = 10):
    """(ours, onnxruntime's, matched rows (ours - theirs, ours, theirs, our node, key)) for a zoo model, the
    times in ms with each runtime's estimated profiler overhead a node taken off."""
    entry = zoo.get(model_name)
    x = zoo.make_input(entry, batch=batch)
    param = export_zoo(model_name, batch=batch)
    plain = compiler.compile(param, cache=False, threads=threads)
    profiled = compiler.compile(param, cache=False, threads=threads, profile=True)
    with tempfile.TemporaryDirectory(prefix="node_compare_") as tmp:
        onnx_path = export_onnx(entry.build(), x, Path(tmp) / "model.onnx")
        ort_plain = onnxruntime_inference_session(onnx_path, threads)
        ort_profiled = onnxruntime_inference_session(onnx_path, threads, profile_prefix=str(Path(tmp) / "ort_profile"))
        feed = {ort_plain.get_inputs()[0].name: x}
        ours_ms, ort_ms, stats = [], [], []
        for _ in range(rounds):
            time.sleep(SETTLE_SECONDS)
            plain(x)
            ours_ms.append(_timed(lambda: plain(x), runs))
            for _ in range(runs):
                profiled(x)
                stats.append(profiled.last_step_stats)
            time.sleep(SETTLE_SECONDS)
            ort_plain.run(None, feed)
            ort_ms.append(_timed(lambda: ort_plain.run(None, feed), runs))
            for _ in range(runs + 1):
                ort_profiled.run(None, feed)
        ours = _ours_convs(profiled, stats, statistics.median(ours_ms))
        theirs = _ort_convs(ort_profiled.end_profiling(), statistics.median(ort_ms), skip=1)
    pool = collections.defaultdict(list)
    for _, key, ms in theirs.convs:
        pool[key].append(ms)
    rows = []
    for name, key, ms in ours.convs:
        match = _matching_key(key, pool)
        if match is not None:
            mine, other = ms - ours.overhead_ms, pool[match].pop(0) - theirs.overhead_ms
            rows.append((mine - other, mine, other, name, key))
    return ours, theirs, sorted(rows, reverse=True)


def _matching_key(key: tuple, pool: dict[tuple, list[float]]) -> tuple | None:
    """onnxruntime's key for our conv's: the same, else the same with the output channels padded to a whole
    NCHWc block (MLAS_NCHWC_BLOCK: 8 lanes on AVX2, 16 on AVX-512; a stem of 8 channels runs as 16 there)."""
    if pool.get(key):
        return key
    for block in (8, 16):
        padded = (*key[:3], -(-key[3] // block) * block, *key[4:])
        if pool.get(padded):
            return padded
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="inception_v3_mini", choices=sorted(zoo.ZOO))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--top", type=int, default=25, help="rows to print")
    args = parser.parse_args()
    ours, theirs, rows = compare(args.model, args.batch, args.threads, args.rounds)
    print(f"{cpu_name()} ({isa()}), {args.threads} threads: {args.model} batch {args.batch}")
    print(f"forward: ours {ours.forward_ms:.3f} ms, onnxruntime {theirs.forward_ms:.3f} ms "
          f"(ratio {ours.forward_ms / theirs.forward_ms:.2f})")
    print(f"profiler overhead a node (estimated, taken off each row): ours {ours.overhead_ms * 1e3:.1f} us, "
          f"onnxruntime {theirs.overhead_ms * 1e3:.1f} us")
    print(f"convs as profiled: ours {len(ours.convs)} ({sum(ms for *_, ms in ours.convs):.3f} ms), onnxruntime "
          f"{len(theirs.convs)} ({sum(ms for *_, ms in theirs.convs):.3f} ms); {len(rows)} matched")
    for diff, mine, other, name, key in rows[:args.top]:
        print(f"{diff * 1e3:+8.1f} us  ours {mine * 1e3:8.1f}  onnxruntime {other * 1e3:8.1f}  {name}  "
              f"out {key[1]}x{key[2]}, weight {key[3:]}")


if __name__ == "__main__":
    main()
