"""Lowering of recurrent layers: nn.LSTM, nn.GRU and nn.RNN (tanh and relu).

pnnx keeps each module whole, its weights as attributes named as torch's parameters
(@weight_ih_l0, @weight_hh_l0_reverse, @bias_ih_l1, @weight_hr_l0 for an LSTM's
projection). We emit one lstm / gru / rnn node per layer, both directions in it, each
layer feeding the next; the final states of the layers are concatenated in torch's order
(layer 0 forward, layer 0 reverse, layer 1 forward, ...). Missing biases and initial states
become zero constants, so every node takes the same plain arrays.

Which pnnx output is which result (output, h_n, c_n) the param file does not say: pnnx drops
the outputs nobody uses, and an LSTM's outputs come in the order the model first uses them
(`y, (h, c) = lstm(x)` with c used first gives c_n, output, h_n). We tell them apart by pnnx's
shape annotations; where shapes agree we take torch's order, as pnnx's own python does
(`_, (h, _) = lstm(x)` is read as h_n; with one layer, one direction and one time step,
output and h_n hold the same values anyway). So an LSTM without proj_size whose c_n is used
before its h_n, or alone, is misread: its h_n and c_n have one shape (pnnx's own python
misreads it too).
An unbatched (2-D) input runs as a batch of one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from compiler.lowering.core import OpContext, Unsupported, lowers
from ir.graph import Value

_KINDS = {"nn.LSTM": ("lstm", 4), "nn.GRU": ("gru", 3), "nn.RNN": ("rnn", 1)}


@dataclass(frozen=True)
class _Layout:
    """What the module's params say about its weights and outputs."""

    kind: str  # the IR op: lstm, gru or rnn
    gates: int
    hidden: int
    out: int  # the hidden state's size: hidden, or an LSTM's proj_size
    layers: int
    directions: int
    bias: bool
    batch_first: bool

    @property
    def results(self) -> tuple[str, ...]:
        return ("output", "h_n", "c_n") if self.kind == "lstm" else ("output", "h_n")

    @property
    def states(self) -> tuple[str, ...]:
        return ("h0", "c0") if self.kind == "lstm" else ("h0",)

    def state_size(self, state: str) -> int:
        return self.hidden if state in ("c0", "c_n") else self.out


def _layout(ctx: OpContext) -> _Layout:
    kind, gates = _KINDS[ctx.op.type]
    hidden = ctx.int_param("hidden_size", minimum=1)
    proj = ctx.int_param("proj_size", 0) if kind == "lstm" else 0
    layers = ctx.int_param("num_layers", 1, minimum=1)
    if not ctx.has_attr(f"weight_ih_l{layers - 1}") or ctx.has_attr(f"weight_ih_l{layers}"):
        raise ctx.format_error(f"num_layers={layers} disagrees with the layers' weights (@weight_ih_l0 ... "
                               f"@weight_ih_l{layers - 1})")
    return _Layout(kind, gates, hidden, proj or hidden, layers, 2 if ctx.param("bidirectional", False) else 1,
                   bool(ctx.param("bias", True)), bool(ctx.param("batch_first", False)))


# -- weights and states of one layer ------------------------------------------------------------


def _stacked(ctx: OpContext, name: str, layer: int, layout: _Layout, dtype: str) -> np.ndarray:
    """The layer's @<name>_l<layer> and, when bidirectional, its _reverse, stacked on a new first axis."""
    suffixes = ("", "_reverse")[:layout.directions]
    return np.stack([np.asarray(ctx.attr(f"{name}_l{layer}{s}"), dtype=dtype) for s in suffixes])


def _layer_weights(ctx: OpContext, layer: int, layout: _Layout, dtype: str) -> list[Value]:
    """[w_ih, w_hh, b_ih, b_hh] and, for a projected LSTM, w_hr: constants for one layer's node."""
    names = ["weight_ih", "weight_hh"]
    arrays = [_stacked(ctx, n, layer, layout, dtype) for n in names]
    if layout.bias:
        arrays += [_stacked(ctx, n, layer, layout, dtype) for n in ("bias_ih", "bias_hh")]
    else:
        zeros = np.zeros((layout.directions, layout.gates * layout.hidden), dtype)
        arrays += [zeros, zeros]
    suffixes = ["w_ih", "w_hh", "b_ih", "b_hh"]
    if layout.out != layout.hidden:
        arrays.append(_stacked(ctx, "weight_hr", layer, layout, dtype))
        suffixes.append("w_hr")
    return [ctx.const(f"l{layer}.{s}", a) for s, a in zip(suffixes, arrays)]


def _initial_states(ctx: OpContext, layout: _Layout, batch: int, unbatched: bool, dtype: str) -> list[list[Value]]:
    """Per layer, the initial states its node takes: slices of the given h0 (and c0), or zeros."""
    given = ctx.inputs[1:]
    if len(given) not in (0, len(layout.states)):
        raise ctx.format_error(f"expected the input and {' and '.join(layout.states)}, got {len(given) + 1} inputs")
    per_state = []
    for name, value in zip(layout.states, given or [None] * len(layout.states)):
        shape = (layout.directions, batch, layout.state_size(name))
        if value is None:
            zeros = np.zeros(shape, dtype)
            per_state.append([ctx.const(f"l{layer}.{name}", zeros) for layer in range(layout.layers)])
            continue
        full = (layout.layers * layout.directions, *shape[1:])
        expected = (full[0], full[2]) if unbatched else full
        if value.shape != expected:
            raise ctx.format_error(f"{name} has shape {value.shape}, expected {expected}")
        if unbatched:
            value = _emit(ctx, "reshape", [value], {"shape": full}, f"{name}.batched")[0]
        if layout.layers == 1:
            per_state.append([value])
        else:
            sizes = (layout.directions,) * layout.layers
            outputs = [ctx.temp(f"l{layer}.{name}") for layer in range(layout.layers)]
            per_state.append(ctx.emit("split", [value], {"dim": 0, "sizes": sizes}, outputs=outputs))
    return [list(states) for states in zip(*per_state)]


def _emit(ctx: OpContext, op: str, inputs: list[Value], attrs: dict, *names: str) -> list[Value]:
    return ctx.emit(op, inputs, attrs, outputs=[ctx.temp(n) for n in names])


# -- which outputs pnnx kept ------------------------------------------------------------------------


def _result_shapes(layout: _Layout, seq: int, batch: int, unbatched: bool) -> dict[str, tuple[int, ...]]:
    """torch's shape of each result (output, h_n, c_n) of the module."""
    features = layout.directions * layout.out
    if unbatched:
        output = (seq, features)
    else:
        output = (batch, seq, features) if layout.batch_first else (seq, batch, features)
    shapes = {"output": output}
    for name in layout.results[1:]:
        state = (layout.layers * layout.directions, batch, layout.state_size(name))
        shapes[name] = (state[0], state[2]) if unbatched else state
    return shapes


def _kept_results(ctx: OpContext, layout: _Layout, shapes: dict[str, tuple[int, ...]]) -> tuple[str, ...]:
    """Which result each pnnx output is: the first arrangement (in torch's order) whose shapes fit."""

    def fits(name: str, operand: str) -> bool:
        annotated = ctx.annotated_shape(operand)
        expected = shapes[name]
        return annotated is None or (len(annotated) == len(expected)
                                     and all(a is None or a == e for a, e in zip(annotated, expected)))

    for kept in itertools.permutations(layout.results, len(ctx.op.outputs)):
        if all(fits(name, operand) for name, operand in zip(kept, ctx.op.outputs)):
            return kept
    raise ctx.format_error(f"outputs {ctx.op.outputs} match none of {layout.results} by shape (expected {shapes})")


# -- the rule ---------------------------------------------------------------------------------------


@lowers("nn.LSTM", "nn.GRU", "nn.RNN")
def recurrent(ctx: OpContext) -> None:
    layout = _layout(ctx)
    x = ctx.input(0)
    if x.type.rank not in (2, 3):
        raise Unsupported(f"input of rank {x.type.rank} (expected 2-D unbatched or 3-D)")
    if not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise Unsupported(f"{x.dtype} input")
    unbatched = x.type.rank == 2
    if unbatched:
        x = _emit(ctx, "reshape", [x], {"shape": (x.shape[0], 1, x.shape[1])}, "x.batched")[0]
    batch_first = layout.batch_first and not unbatched  # torch ignores batch_first for unbatched inputs
    seq, batch = (x.shape[1], x.shape[0]) if batch_first else x.shape[:2]
    shapes = _result_shapes(layout, seq, batch, unbatched)
    kept = _kept_results(ctx, layout, shapes)

    attrs = {"batch_first": batch_first}
    if layout.kind == "rnn":
        nonlinearity = ctx.param("nonlinearity", "tanh")
        if nonlinearity not in ("tanh", "relu"):
            raise Unsupported(f"nonlinearity={nonlinearity!r}")
        attrs["nonlinearity"] = nonlinearity
    finals: list[list[Value]] = []
    for layer, states in enumerate(_initial_states(ctx, layout, batch, unbatched, x.dtype)):
        weights = _layer_weights(ctx, layer, layout, x.dtype)
        names = [f"l{layer}.{r}" for r in layout.results]
        x, *layer_finals = _emit(ctx, layout.kind, [x, *states, *weights], attrs, *names)
        finals.append(layer_finals)

    results = {"output": x}
    for k, name in enumerate(layout.results[1:]):
        per_layer = [f[k] for f in finals]
        if name in kept:  # torch's h_n / c_n: every layer's, directions within layers
            results[name] = per_layer[0] if len(per_layer) == 1 else _emit(ctx, "concat", per_layer, {"dim": 0},
                                                                            name)[0]
    for name, operand in zip(kept, ctx.op.outputs):
        value = results[name]
        if value.shape != shapes[name]:  # unbatched
            value = _emit(ctx, "reshape", [value], {"shape": shapes[name]}, f"{name}.unbatched")[0]
        ctx.alias(operand, value)
