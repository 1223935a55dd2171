"""Compile one function at a lower LLVM optimisation level than numba's default (3).

A generated forward is straight-line code: calls to kernels through pointers, array
views of the weights and the arena, a few tuples; the loops live in the kernels, which
keep numba's default. Measured on a DenseNet-121 forward (~1200 lines; AMD EPYC, AVX2),
numba's compile of it takes 29 s at O0 (unoptimised, the IR stays large for the later
stages), 17.5 s at O1, 21 s at O3, and runs as fast at each.

numba reads `config.OPT` each time it builds a pass manager (numba.core.codegen,
0.68), so setting it while one function compiles, under numba's compiler lock (no
other compile runs meanwhile), lowers the level for that function's module only. The
target machine's own code-generation level is fixed when numba starts, and stays.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from numba.core import config
from numba.core.compiler_lock import global_compiler_lock

FORWARD_OPT_LEVEL = 1  # the forward's level (see above)


@contextlib.contextmanager
def opt_level(level: int) -> Iterator[None]:
    """Compile at LLVM level `level` (0-3) what numba compiles inside this block."""
    with global_compiler_lock:
        saved = config.OPT
        config.OPT = config._OptLevel(level)  # numba-internal (0.68): NUMBA_OPT's parsed value
        try:
            yield
        finally:
            config.OPT = saved
