"""The fixed cost of one call of a compiled model, measured on a trivial one (a ReLU of 4 floats).

    python -m bench.call_overhead [--calls 20000]

Writes the model (a hand-written .pnnx.param and an empty .pnnx.bin) to a temporary
directory, compiles it, and times the calls: the whole `m(x)`, and its parts: the input
checks (`check_inputs`), and the jitted forward called directly (numba's dispatch of the
arguments plus the forward itself). The work is a few nanoseconds, so what is measured is
what every call of every model pays before and after its kernels. Target: under 5 us.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

import compiler
from compiler.run_control import UNCONTROLLED

TRIVIAL_PARAM = """7767517
3 2
pnnx.Input               pnnx_input_0             0 1 0 #0=(1,4)f32
nn.ReLU                  relu                     1 1 0 1 #0=(1,4)f32 #1=(1,4)f32
pnnx.Output              pnnx_output_0            1 0 1 #1=(1,4)f32
"""


def write_trivial_model(directory: Path) -> Path:
    """A ReLU of a (1, 4) float32 input, as pnnx would write it; return the .param path."""
    param = directory / "relu.pnnx.param"
    param.write_text(TRIVIAL_PARAM)
    with zipfile.ZipFile(directory / "relu.pnnx.bin", "w"):
        pass
    return param


def best_us(fn, calls: int) -> float:
    """The best of 5 rounds of `calls` calls, in microseconds per call."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        m = compiler.compile(write_trivial_model(Path(tmp)), cache_dir=Path(tmp) / "cache")
        x = np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4)
        np.testing.assert_array_equal(m(x), np.maximum(x, 0))
        checked = m.check_inputs([x])
        rows = [("m(x): the whole call", best_us(lambda: m(x), args.calls)),
                ("  check_inputs", best_us(lambda: m.check_inputs([x]), args.calls)),
                ("  _execute (thread count, dispatch, forward)",
                 best_us(lambda: m._execute(checked, UNCONTROLLED), args.calls))]
    for label, us in rows:
        print(f"{label:48s} {us:7.2f} us")


if __name__ == "__main__":
    main()
