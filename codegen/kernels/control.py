"""Kernels a forward calls between its nodes, for its caller rather than for the model.

A generated forward is one straight-line function: an `if` between nodes would split it into
hundreds of blocks, and numba's passes over its IR grow with blocks times variables (DenseNet-121's
forward took 400 s to compile with one branch per node, 7 s without). A call is straight-line code,
so the stop check is a kernel: it raises, and the forward passes the exception on.
"""

from __future__ import annotations

import numba

from codegen.kernels.common import SEQ

# What a forward raises when its caller asked it to stop: check_stop found stop[0] set (by cancel(),
# or by compiler/run_control.py's watchdog at the deadline) and wrote the step it stopped before to stop[1]
STOPPED = "pnnx-jit: the run was asked to stop"


@numba.njit(**SEQ)
def check_stop(stop, step):
    """Raise RuntimeError(STOPPED) before node `step` if the run was asked to stop."""
    if stop[0] != 0:
        stop[1] = step
        raise RuntimeError(STOPPED)
