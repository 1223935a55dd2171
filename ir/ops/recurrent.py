"""Recurrent layers (lstm, gru, rnn): one layer of torch's nn.LSTM / nn.GRU / nn.RNN, both directions.

A node runs one layer over a whole sequence, in one or two directions: the lowering stacks
layers by feeding one node's output to the next. Every operand is a plain array with the
direction first (D = 1, or 2 when bidirectional; index 1 is the reverse direction):

    x     (T, N, I), or (N, T, I) with batch_first
    h0    (D, N, P)       initial hidden state (P = H, or the LSTM's proj_size)
    c0    (D, N, H)       initial cell state (lstm only)
    w_ih  (D, G*H, I)     input weights, torch's gate blocks (G = 4 lstm, 3 gru, 1 rnn)
    w_hh  (D, G*H, P)     hidden weights
    b_ih  (D, G*H)        biases (zeros for bias=False)
    b_hh  (D, G*H)
    w_hr  (D, P, H)       the LSTM's projection (proj_size > 0 only)

The outputs are torch's: y (T, N, D*P) (or (N, T, D*P)) with the directions concatenated on
the features, h_n (D, N, P) and, for lstm, c_n (D, N, H). The references follow torch's gate
formulas and order (lstm i, f, g, o; gru r, z, n with r applied to W_hn h + b_hn), project
the input of every time step with one matmul, and compute in float64.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ir.op_registry import BOOL, STR, register
from ir.types import TensorType

_GATES = {"lstm": 4, "gru": 3, "rnn": 1}


# -- shape rule ---------------------------------------------------------------------------------


def _expect(op: str, name: str, t: TensorType, shape: tuple[int, ...]) -> None:
    if t.shape != shape:
        raise ValueError(f"{op}: {name} has shape {t.shape}, expected {shape}")


def _recurrent_types(op: str):
    """Shape rule of one recurrent layer: checks every operand against x and w_ih."""
    gates = _GATES[op]

    def infer(types: list[TensorType], attrs: dict) -> list[TensorType]:
        x = types[0]
        states = types[1:3] if op == "lstm" else types[1:2]
        w_ih, w_hh, b_ih, b_hh = types[len(states) + 1:len(states) + 5]
        w_hr = types[len(states) + 5] if len(types) > len(states) + 5 else None
        if not np.issubdtype(np.dtype(x.dtype), np.floating):
            raise ValueError(f"{op} expects a floating-point input, got {x}")
        if x.rank != 3:
            raise ValueError(f"{op} expects a 3-D input (seq, batch, features), got {x}")
        if w_ih.rank != 3 or w_ih.shape[0] not in (1, 2) or w_ih.shape[1] % gates or w_ih.shape[1] == 0:
            raise ValueError(f"{op}: w_ih {w_ih.shape} is not (directions, {gates} * hidden, input)")
        directions, hidden = w_ih.shape[0], w_ih.shape[1] // gates
        seq, batch = (x.shape[1], x.shape[0]) if attrs["batch_first"] else x.shape[:2]
        out = w_hr.shape[1] if w_hr is not None else hidden
        _expect(op, "w_ih", w_ih, (directions, gates * hidden, x.shape[2]))
        _expect(op, "w_hh", w_hh, (directions, gates * hidden, out))
        _expect(op, "b_ih", b_ih, (directions, gates * hidden))
        _expect(op, "b_hh", b_hh, (directions, gates * hidden))
        if w_hr is not None:
            _expect(op, "w_hr", w_hr, (directions, w_hr.shape[1], hidden))
        _expect(op, "h0", states[0], (directions, batch, out))
        if op == "lstm":
            _expect(op, "c0", states[1], (directions, batch, hidden))
        y = (batch, seq, directions * out) if attrs["batch_first"] else (seq, batch, directions * out)
        results = [x.with_shape(y), x.with_shape((directions, batch, out))]
        if op == "lstm":
            results.append(x.with_shape((directions, batch, hidden)))
        return results

    return infer


# -- the scan shared by the three cells -----------------------------------------------------------

# cell(gx, gh, state, d) -> new state: gx and gh are one step's input and hidden projections
# (W_ih x + b_ih and W_hh h + b_hh, each (N, G*H)), state a tuple whose first item is h
Cell = Callable[[np.ndarray, np.ndarray, tuple[np.ndarray, ...], int], tuple[np.ndarray, ...]]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow for large -x


def _scan(x, states, w_ih, w_hh, b_ih, b_hh, cell: Cell, batch_first: bool) -> tuple[np.ndarray, ...]:
    """Run `cell` over the sequence in each direction; return (y, final state per item of `states`)."""
    seq = np.swapaxes(x, 0, 1) if batch_first else x
    seq = seq.astype(np.float64)
    length = seq.shape[0]
    ys, finals = [], []
    for d in range(w_ih.shape[0]):
        w_hh_t = w_hh[d].T.astype(np.float64)
        gx = seq @ w_ih[d].T.astype(np.float64) + b_ih[d]  # every time step's input projection at once
        state = tuple(s[d].astype(np.float64) for s in states)
        y = np.empty((length,) + state[0].shape)
        for t in (reversed(range(length)) if d == 1 else range(length)):
            state = cell(gx[t], state[0] @ w_hh_t + b_hh[d], state, d)
            y[t] = state[0]
        ys.append(y)
        finals.append(state)
    y = np.concatenate(ys, axis=-1)
    y = np.swapaxes(y, 0, 1) if batch_first else y
    stacked = [np.stack([f[k] for f in finals]) for k in range(len(states))]
    return tuple(a.astype(x.dtype) for a in (y, *stacked))


# -- lstm / gru / rnn -----------------------------------------------------------------------------


@register("lstm", ["x", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh", "w_hr?"], {"batch_first": BOOL(False)},
          infer=_recurrent_types("lstm"))
def lstm(x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr=None, *, batch_first):
    def cell(gx, gh, state, d):
        i, f, g, o = np.split(gx + gh, 4, axis=-1)
        c = _sigmoid(f) * state[1] + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        if w_hr is not None:
            h = h @ w_hr[d].T.astype(np.float64)
        return h, c

    return _scan(x, (h0, c0), w_ih, w_hh, b_ih, b_hh, cell, batch_first)


@register("gru", ["x", "h0", "w_ih", "w_hh", "b_ih", "b_hh"], {"batch_first": BOOL(False)},
          infer=_recurrent_types("gru"))
def gru(x, h0, w_ih, w_hh, b_ih, b_hh, *, batch_first):
    def cell(gx, gh, state, d):
        x_r, x_z, x_n = np.split(gx, 3, axis=-1)
        h_r, h_z, h_n = np.split(gh, 3, axis=-1)
        r = _sigmoid(x_r + h_r)
        z = _sigmoid(x_z + h_z)
        n = np.tanh(x_n + r * h_n)
        return ((1.0 - z) * n + z * state[0],)

    return _scan(x, (h0,), w_ih, w_hh, b_ih, b_hh, cell, batch_first)


@register("rnn", ["x", "h0", "w_ih", "w_hh", "b_ih", "b_hh"],
          {"batch_first": BOOL(False), "nonlinearity": STR("tanh", choices=("tanh", "relu"))},
          infer=_recurrent_types("rnn"))
def rnn(x, h0, w_ih, w_hh, b_ih, b_hh, *, batch_first, nonlinearity):
    activation = np.tanh if nonlinearity == "tanh" else (lambda a: np.maximum(a, 0.0))

    def cell(gx, gh, state, d):
        return (activation(gx + gh),)

    return _scan(x, (h0,), w_ih, w_hh, b_ih, b_hh, cell, batch_first)
