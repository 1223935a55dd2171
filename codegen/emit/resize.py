"""Emit rules of the resize family: the forward's calls into codegen/kernels/resize.py."""

from __future__ import annotations

import math

from codegen.emit import Emit, const, emits, lit
from codegen.kernels.resize import MODE_CODES, resize, resize_cubic
from ir.errors import CodegenUnsupportedError
from ir.ops.resize import coordinate_scale, cubic_source_weights


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


@emits("resize_cubic")
def _emit_resize_cubic(e: Emit) -> list[str]:
    """Bicubic over the last two axes (what torch has); the index and weight tables are constants."""
    a, x, out = e.node.attrs, e.node.inputs[0].shape, e.node.outputs[0].shape
    if len(a["size"]) != 2:
        raise CodegenUnsupportedError(f"cubic resize of {len(a['size'])} axes (the kernel does 2)")
    scales, dtype = a["scales"] or (None, None), e.node.inputs[0].dtype
    tables = []
    for axis, tag in ((-2, "h"), (-1, "w")):
        index, weight = cubic_source_weights(x[axis], out[axis], scales[axis], a["align_corners"])
        tables += [e.constant(f"{tag}_index", index), e.constant(f"{tag}_weight", weight.astype(dtype))]
    planes = math.prod(x[:-2])
    return [f"{e.call(resize_cubic)}({e.args[0]}.reshape({lit((planes,) + x[-2:])}), "
            f"{e.outs[0]}.reshape({lit((planes,) + out[-2:])}), {', '.join(tables)})"]
