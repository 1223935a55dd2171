"""Command line: python -m compiler <command> ...

    run [MODEL] [--input x.npy ...] [--output-dir DIR] [--backend B]
        compile MODEL (default: the demo model shipped in the package) and run it
        on the given inputs (default: random), printing output shapes and values.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np

import compiler
from compiler.api import BACKENDS
from compiler.errors import CompilerError


def shipped_model() -> Path:
    """The demo model inside the package (tiny_cnn, converted by pnnx)."""
    return Path(str(resources.files("compiler") / "data" / "tiny_cnn.pnnx.param"))


def load_input_files(paths: Sequence[str], model: compiler.CompiledModel) -> list[np.ndarray]:
    arrays = []
    for path in paths:
        try:
            arrays.append(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise CompilerError(f"cannot read input file {path}: {exc}") from None
    return arrays


def random_inputs(model: compiler.CompiledModel, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(spec.shape).astype(spec.dtype) for spec in model.inputs]


def cmd_run(args: argparse.Namespace) -> int:
    path = Path(args.model) if args.model else shipped_model()
    model = compiler.compile(path, backend=args.backend)
    arrays = load_input_files(args.input, model) if args.input else random_inputs(model)
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
            np.save(out_dir / f"{spec.name}.npy", array)
    if args.output_dir:
        print(f"saved {len(outputs)} output(s) to {args.output_dir}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m compiler", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="compile and run a model (default: the shipped demo model)")
    run.add_argument("model", nargs="?", help="path to MODEL.pnnx.param (.pnnx.bin beside it)")
    run.add_argument("--input", action="append", default=[], metavar="FILE.npy", help="one per model input, in order")
    run.add_argument("--output-dir", help="save each output as <name>.npy here")
    run.add_argument("--backend", choices=BACKENDS, default="interpreter")
    run.set_defaults(func=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CompilerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
