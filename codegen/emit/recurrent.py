"""Emit rules of the recurrent family: lstm, gru and rnn layers call codegen/kernels/recurrent.py."""

from __future__ import annotations

from codegen.emit import Emit, const_args, emits
from codegen.kernels.recurrent import KIND_CODES, pack_directions, recurrent_layer


@emits("lstm", "gru", "rnn")
def _emit_recurrent(e: Emit) -> list[str]:
    node, args, outs = e.node, e.args, e.outs
    if node.op == "lstm":  # x, h0, c0, w_ih, w_hh, b_ih, b_hh[, w_hr] -> y, h_n, c_n
        x, h0, c0, w_ih, w_hh, b_ih, b_hh = args[:7]
        w_hr = args[7] if len(args) > 7 else None
        y, h_n, c_n = outs
    else:  # x, h0, w_ih, w_hh, b_ih, b_hh -> y, h_n; no cell state, no projection
        x, h0, w_ih, w_hh, b_ih, b_hh = args
        c0, w_hr = f"emptied({h0})", None
        (y, h_n), c_n = outs, f"emptied({outs[1]})"
    # float32 weights known now, of a float32 layer: laid out in the kernel's panels once (pack_directions)
    weights = {3: "w_ih", 4: "w_hh", 7: "w_hr"} if node.op == "lstm" else {2: "w_ih", 3: "w_hh"}
    packed = {}
    for index, name in weights.items():
        w = node.inputs[index] if index < len(node.inputs) else None
        if w is not None and w.is_constant and w.dtype == node.inputs[0].dtype == "float32":
            packed[name] = e.prepack(index, "panels", pack_directions)
    w_ih, w_hh, w_hr = packed.get("w_ih", w_ih), packed.get("w_hh", w_hh), packed.get("w_hr", w_hr)
    if w_hr is None:  # no projection: an empty array of w_hh's type, whichever layout that has
        w_hr = f"emptied({w_hh})"
    kind = KIND_CODES[node.attrs.get("nonlinearity", node.op)]
    return [f"{e.call(recurrent_layer)}({const_args(kind)}, {x}, {h0}, {c0}, {w_ih}, {w_hh}, {b_ih}, {b_hh}, "
            f"{w_hr}, {y}, {h_n}, {c_n}, {const_args(node.attrs['batch_first'])})"]
