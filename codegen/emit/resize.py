"""Emit rules of the resize family: the forward's calls into codegen/kernels/resize.py."""

from __future__ import annotations

import math

from codegen.emit import Emit, const, emits, lit
from codegen.kernels.resize import MODE_CODES, resize
from ir.ops.resize import coordinate_scale


@emits("resize")
def _emit_resize(e: Emit) -> list[str]:
    a, x, out = e.node.attrs, e.node.inputs[0].shape, e.node.outputs[0].shape
    k = len(a["size"])
    planes = math.prod(x[:len(x) - k])
    in_dims, out_dims = (1,) * (3 - k) + x[len(x) - k:], (1,) * (3 - k) + out[len(out) - k:]
    given = (None,) * (3 - k) + tuple(a["scales"] if a["scales"] is not None else (None,) * k)
    scales = ", ".join(f"np.float32({lit(float(coordinate_scale(i, o, s)))})"
                       for i, o, s in zip(in_dims, out_dims, given))
    return [f"{e.call(resize)}({e.args[0]}.reshape({lit((planes,) + in_dims)}), "
            f"{e.outs[0]}.reshape({lit((planes,) + out_dims)}), {const(MODE_CODES[a['mode']])}, "
            f"{const(a['align_corners'])}, ({scales}))"]
