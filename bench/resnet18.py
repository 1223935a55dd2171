"""ResNet-18, batch 1, 224x224, 2 threads: compiled vs interpreted vs torch eager vs onnxruntime.

    python -m bench.resnet18 [--model resnet18] [--threads 2] [--profile]

Prints median latencies and ratios to onnxruntime, the cold compile time, and
with --profile the time per kernel of the compiled forward.
"""

from __future__ import annotations

import argparse

import numpy as np

from bench import zoo
from bench.runtimes import cpu_name, median_ms, onnxruntime_session, ours, torch_eager


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18", choices=sorted(zoo.ZOO))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--profile", action="store_true", help="time each kernel of the compiled forward")
    args = parser.parse_args()

    x = zoo.make_input(zoo.get(args.model), batch=args.batch)
    compiled, compile_s, _ = ours(args.model, args.batch, "numba", args.threads, profile=args.profile)
    interpreted, _, _ = ours(args.model, args.batch, "interpreter", args.threads)
    runs = {
        "compiled (numba)": lambda: compiled(x),
        "interpreter": lambda: interpreted(x),
        "torch eager": (lambda f: lambda: f(x))(torch_eager(args.model, args.threads)),
        "onnxruntime": (lambda f: lambda: f(x))(onnxruntime_session(args.model, args.batch, args.threads)),
    }
    times = {name: median_ms(fn, repeat=args.repeat) for name, fn in runs.items()}
    ort = times["onnxruntime"]
    print(f"{args.model} batch {args.batch}, {args.threads} threads, {cpu_name()}")
    print(f"{'runtime':<20}{'median ms':>12}{'vs onnxruntime':>16}")
    for name, ms in times.items():
        print(f"{name:<20}{ms:>12.2f}{ms / ort:>15.2f}x")
    print(f"compile time (this process; cold if the cache was empty): {compile_s:.1f} s")
    print(f"memory plan: {compiled.memory_plan.summary()}")
    if args.profile:
        profile = compiled.profile_kernels(x, repeat=10)
        total = sum(ms for _, _, ms in profile)
        print(f"\nper-kernel time (median of 10, total {total:.2f} ms):")
        for name, op, ms in sorted(profile, key=lambda t: -t[2])[:25]:
            print(f"  {ms:8.3f} ms {100 * ms / total:5.1f}%  {op:<20} {name}")
    np.testing.assert_allclose(compiled(x), interpreted(x), rtol=1e-3, atol=1e-3)


if __name__ == "__main__":
    main()
