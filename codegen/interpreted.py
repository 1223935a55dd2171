"""Nodes the numba backend has no kernel for: the forward runs their numpy reference in Python.

The seeds partition a graph between devices and pass the values crossing a cut through Send/Recv
pairs; here the cut is between the jitted forward and the interpreter, and it is one block per
interpreted node inside the forward:

    with numba.objmode():                  # takes the GIL, boxes the arrays (views, no copies)
        run_reference("roll", {"shifts": (1,), "dims": (2,)}, (v_x,), (v_y,))  # roll_3

Its inputs and outputs are the same arrays the memory plan gave the node (views of the arena, or
of the outputs' own buffers): the reference's results are written into them, so the kernels
around it read and write where they always do. A call costs a few microseconds on top of the
reference: a safety net for ops no model spends its time in, not a way to run hot ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ir.op_registry import get_op


def run_reference(op: str, attrs: dict[str, Any], inputs: tuple, outputs: tuple) -> None:
    """Run op's reference on `inputs` and write each result into the array of `outputs` in order."""
    results = get_op(op).run(list(inputs), attrs)
    for out, result in zip(outputs, results):
        result = np.asarray(result)
        if result.shape != out.shape:
            raise RuntimeError(f"{op}: the reference gave shape {result.shape}, the graph says {out.shape}")
        out[...] = result


def skipped_when_linking(op: str, attrs: dict[str, Any], inputs: tuple, outputs: tuple) -> None:
    """run_reference's stand-in while codegen/linker.py runs the forward in Python to find its kernel
    calls: no kernel runs then, so the inputs hold garbage (an index out of range, say)."""
