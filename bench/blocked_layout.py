"""The block-channels pass on and off, in one process: a zoo model's whole forward timed both ways in
alternating rounds (this VM's speed drifts from process to process far more than the ratio).

    python -m bench.blocked_layout --model resnet50 [--batch 1] [--rounds 21] [--nodes] [--block 64]

Prints the blocked ops the pass made, the largest difference between the two forwards' outputs, the
median of each forward's time and of the per-round ratio (blocked / NCHW) with its quartiles; with
--nodes, each node's time in both forwards' profiles (the blocked forward's nodes, matched by name).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import compiler
from bench import zoo
from bench.pnnx_export import export_zoo
from bench.runtimes import cpu_name


def compiled(param, threads: int, blocked: bool, profile: bool, block: int | None = None):
    """The model compiled with the pass as the pipeline runs it (blocked; with `block` channels a block
    where given, the kernels' taps_width()) or switched off."""
    passes = sys.modules["compiler.passes.block_channels"]
    chosen = passes.channel_block
    if not blocked or block is not None:
        passes.channel_block = lambda: block if blocked else None
    try:
        return compiler.compile(param, cache=False, threads=threads, profile=profile)
    finally:
        passes.channel_block = chosen


def node_times(model, x, runs: int = 25) -> dict[str, float]:
    for _ in range(3):
        model(x)
    stats = []
    for _ in range(runs):
        model(x)
        stats.append(model.last_step_stats)
    return {s.node: statistics.median(r[i].seconds for r in stats) * 1e6 for i, s in enumerate(stats[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50", choices=sorted(zoo.ZOO))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--nodes", action="store_true", help="each node's time in both forwards' profiles")
    parser.add_argument("--block", type=int, help="run the pass with this block where the pipeline would not "
                        "(the blocked kernels' taps_width(): 64 on AVX-512)")
    args = parser.parse_args()

    param = export_zoo(args.model, batch=args.batch)
    x = zoo.make_input(zoo.get(args.model), batch=args.batch)
    new = compiled(param, args.threads, True, args.nodes, args.block)
    old = compiled(param, args.threads, False, args.nodes)
    ops = [n.op for n in new.graph.nodes]
    blocked_ops = [op for op in ops if op.startswith("blocked_")]
    print(f"{cpu_name()}; {args.model} batch {args.batch}: {ops.count('blocked_conv2d')} blocked convs, "
          f"{ops.count('blocked_expand_depthwise')} expansions fused into depthwise ones, "
          f"{len(blocked_ops)} blocked nodes in all, {ops.count('to_blocked')} to_blocked, "
          f"{ops.count('from_blocked')} from_blocked")
    if not blocked_ops:
        print("the pass blocked nothing here")
    ys_new, ys_old = new(x), old(x)
    for a, b in zip(ys_new if isinstance(ys_new, list) else [ys_new], ys_old if isinstance(ys_old, list) else [ys_old]):
        print(f"largest difference {float(np.abs(a - b).max()):.3g} (outputs up to {float(np.abs(b).max()):.3g})")
    times: dict[str, list[float]] = {"blocked": [], "nchw": [], "ratio": []}
    repeat = 5 if args.batch == 1 else 2
    for r in range(args.rounds):
        round_ms = {}
        for name, model in (("blocked", new), ("nchw", old)) if r % 2 else (("nchw", old), ("blocked", new)):
            model(x)
            start = time.perf_counter()
            for _ in range(repeat):
                model(x)
            round_ms[name] = (time.perf_counter() - start) / repeat * 1e3
        times["blocked"].append(round_ms["blocked"])
        times["nchw"].append(round_ms["nchw"])
        times["ratio"].append(round_ms["blocked"] / round_ms["nchw"])
    q = sorted(times["ratio"])
    print(f"blocked {statistics.median(times['blocked']):.3f} ms, NCHW {statistics.median(times['nchw']):.3f} ms; "
          f"blocked / NCHW median {statistics.median(q):.3f} (quartiles {q[len(q) // 4]:.3f}-{q[3 * len(q) // 4]:.3f}, "
          f"{args.rounds} rounds)")
    if args.nodes:
        blocked_t, nchw_t = node_times(new, x), node_times(old, x)
        for node in new.graph.nodes:
            a, b = blocked_t[node.name], nchw_t.get(node.name)
            shape = node.inputs[1].shape if node.op.endswith("conv2d") else node.outputs[0].shape
            ratio = f"{a / b:5.2f}" if b else "    -"
            print(f"{node.op:16s} {str(shape):22s} blocked {a:8.1f} us  NCHW {b or 0:8.1f} us  {ratio}")
        print(f"sum of steps: blocked {sum(blocked_t.values()) / 1e3:.2f} ms, NCHW {sum(nchw_t.values()) / 1e3:.2f} ms")


if __name__ == "__main__":
    main()
