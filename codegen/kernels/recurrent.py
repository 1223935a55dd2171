"""One layer of an LSTM, GRU or RNN over a whole sequence, in one or both directions (ir/ops/recurrent.py).

Per direction: the input projection of every time step is one product (x @ W_ih^T + b_ih), then each
step is one small product of the hidden state (h @ W_hh^T + b_hh) and the gate arithmetic, row by
row, in loops LLVM vectorises (vmath's sigmoid and tanh). Products by float32 weights known when
the model compiled run on our microkernel (gemm.linear_packed, the weights laid out in its panels
then: pack_directions), others through np.dot. The
steps are sequential; a bidirectional layer's two directions run on two threads where its steps' products
are small (recurrent_layer), else the layer runs on the calling thread.

Operands as the op has them, with the direction first. The forward passes empty arrays (the
emptied() of an array of the same type) for what a kind does not have: c0 and c_n for GRU and RNN,
w_hr for an LSTM without projection; so one compiled signature serves every kind of a dtype.
"""

from __future__ import annotations

import numba
import numpy as np
from numba.core import types
from numba.extending import overload

from codegen.kernels.common import frozen
from codegen.kernels.gemm import (
    PARALLEL_MIN_MACS,
    a_rows_block,
    linear_packed,
    row_block_columns,
    transpose_padded,
    transposed_pad,
)
from codegen.kernels.microkernel import MR, half_panels, panel_width
from codegen.kernels.tasks import run_tasks
from codegen.kernels.vmath import fast_sigmoid, fast_tanh

LSTM, GRU, RNN_TANH, RNN_RELU = 0, 1, 2, 3
KIND_CODES = {"lstm": LSTM, "gru": GRU, "tanh": RNN_TANH, "relu": RNN_RELU}


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _lstm_cell(gates, c, h_full, hidden):
    """c = f * c + i * g, h = o * tanh(c) for one batch row; gates (4 * hidden,) in torch's i, f, g, o order."""
    for j in range(hidden):
        i = fast_sigmoid(gates[j])
        f = fast_sigmoid(gates[hidden + j])
        g = fast_tanh(gates[2 * hidden + j])
        o = fast_sigmoid(gates[3 * hidden + j])
        cj = f * c[j] + i * g
        c[j] = cj
        h_full[j] = o * fast_tanh(cj)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _gru_cell(gx, gh, h, hidden):
    """h = (1 - z) n + z h, n = tanh(x_n + r (W_hn h + b_hn)) for one batch row (r, z, n blocks)."""
    for j in range(hidden):
        r = fast_sigmoid(gx[j] + gh[j])
        z = fast_sigmoid(gx[hidden + j] + gh[hidden + j])
        n = fast_tanh(gx[2 * hidden + j] + r * gh[2 * hidden + j])
        h[j] = n + z * (h[j] - n)


def pack_directions(weight: np.ndarray) -> np.ndarray:
    """A float32 recurrent weight (directions, O, K) as each direction's linear_packed panels
    (directions, panels, K, transposed_pad()), laid out when the model compiles (codegen/emit/recurrent.py)
    instead of at every call."""
    return np.stack([transpose_padded(w) for w in weight])


def _pack(w):
    """A weight (O, K) laid out for _times."""


@overload(_pack)
def _ol_pack(w):
    if w.ndim == 3:  # float32 panels laid out when the model compiled (pack_directions)
        return lambda w: w
    return lambda w: np.ascontiguousarray(w.T)  # a weight computed in the graph, or not float32: np.dot's


@numba.njit(cache=True, nogil=True)
def _small_times(a, packed, out):
    """out (M, O) = a (M, K) @ w.T, packed: w's float32 panels (pack_directions), for a product too small
    for threads: one microkernel call per MR rows and two vectors of features (or one: gemm.row_block_columns'
    choice, but never its 4-vector calls, whose 24 accumulators and prefetches cost more than they save on
    so short a reduction: LSTM/GRU-mini's steps ran 8-14% slower), straight into out where a whole block
    fits (a last partial group of rows overlapping the group before it), else through a block of scratch.
    linear_packed's tiles, blocks and epilogue cost ~0.7 us a call, a step of a small layer 8 x 24 -> 96."""
    m_n, k = a.shape
    o_n = out.shape[1]
    nr, width = panel_width(), half_panels(o_n)
    af, wf, of = a.reshape(-1), packed.reshape(-1), out.reshape(-1)
    # MR rows or more: a last partial group of rows overlaps the group before it, whose rows it recomputes
    # to the same sums; fewer rows are zero-padded to MR in `last`
    partial = m_n if m_n < MR else 0
    last = np.zeros(MR * k, np.float32) if partial else af[:0]  # (no allocation when unused: ~40 ns each)
    for i in range(partial * k):
        last[i] = af[i]
    block = np.empty(MR * nr, np.float32) if partial or o_n % nr else af[:0]
    for g in range(-(-m_n // MR)):
        r0 = 0 if partial else min(g * MR, m_n - MR)  # the group's first row
        rows = partial if partial else MR
        c = 0
        while c < o_n:
            cols = min(row_block_columns(c, c, width), nr)
            b0 = c // transposed_pad() * k * transposed_pad() + c % transposed_pad()
            if not partial and c + cols <= o_n:
                a_rows_block(cols, k, af, r0 * k, k, 1, wf, b0, of, r0 * o_n + c, o_n, False)
            else:
                if partial:
                    a_rows_block(cols, k, last, 0, k, 1, wf, b0, block, 0, nr, False)
                else:
                    a_rows_block(cols, k, af, r0 * k, k, 1, wf, b0, block, 0, nr, False)
                for i in range(rows):
                    for j in range(min(cols, o_n - c)):
                        of[(r0 + i) * o_n + c + j] = block[i * nr + j]
            c += cols


def _times(a, packed, bias, out, zeros):
    """out = a @ w.T (+ bias, unless None), packed = _pack(w): panels (pack_directions) or w.T; zeros:
    float32 zeros, at least a row of out (the bias linear_packed gets for none: made once per layer)."""


@overload(_times)
def _ol_times(a, packed, bias, out, zeros):
    """float32 panels on our microkernel (gemm.linear_packed): OpenBLAS's sgemm took ~1 us a call whatever
    its size, and a step of a small layer is a call (a 2-layer bidirectional LSTM of 24 features at batch
    8: 72 us a layer against onnxruntime's 26; AVX-512 EPYC). A transposed weight through np.dot."""
    if packed.ndim == 3:
        # linear_packed with the argument types a forward's linear layer passes (read-only weight and
        # bias, an empty view for no residual, int64 codes: codegen/emit/gemm.py), so that an LSTM
        # shares that signature, whether its weights were packed at compile time or not
        if isinstance(bias, types.NoneType):
            def times32(a, packed, bias, out, zeros):
                if a.shape[0] * out.shape[1] * a.shape[1] < PARALLEL_MIN_MACS:
                    _small_times(a, packed, out)
                else:
                    none = np.int64(0)  # not a literal (common.py)
                    linear_packed(a, frozen(packed), frozen(zeros[:out.shape[1]]), out[:0], out,
                                  none, 0.0, 0.0, none, 0.0, 0.0)
            return times32

        def times32_bias(a, packed, bias, out, zeros):
            none = np.int64(0)  # not a literal (common.py)
            linear_packed(a, frozen(packed), frozen(bias), out[:0], out, none, 0.0, 0.0, none, 0.0, 0.0)
        return times32_bias

    def times(a, packed, bias, out, zeros):
        out[:] = np.dot(a, packed)
        if bias is not None:
            out += bias
    return times


@numba.njit(cache=True, nogil=True, error_model="numpy")
def recurrent_layer(kind, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, y, h_n, c_n, batch_first):
    """y, h_n (and c_n) of one layer; x (T, N, I), or (N, T, I) with batch_first; kind: KIND_CODES.
    Every direction's input projection first (each one product, on the threads where it is large), then the
    directions' steps, one task each (_direction_steps): on two threads where every step's products are small
    enough to run on the calling thread (_small_times) and the weights are float32 panels."""
    # (the weights may be panels already: pack_directions)
    directions, width = h0.shape[0], h0.shape[2]  # the hidden state's size: hidden, or an LSTM's proj_size
    hidden = c0.shape[2] if kind == LSTM else width
    gate_rows = hidden * (4 if kind == LSTM else 3 if kind == GRU else 1)
    features = x.shape[2]
    if batch_first:
        batch, steps = x.shape[0], x.shape[1]
    else:
        steps, batch = x.shape[0], x.shape[1]
    rows = x.reshape(steps * batch, features)
    gx = np.empty((directions, steps * batch, gate_rows), x.dtype)
    zeros = np.zeros(max(gate_rows, width), np.float32)  # no bias, for _times
    for d in range(directions):
        # every step's input projection; b_hh adds to the same sum, but for GRU's n gate, whose part r scales
        bias = b_ih[d] + b_hh[d] if kind != GRU else b_ih[d].copy()
        _times(rows, _pack(w_ih[d]), bias, gx[d], zeros)
    small = batch * width * gate_rows < PARALLEL_MIN_MACS and batch * hidden * width < PARALLEL_MIN_MACS
    serial = directions == 1 or not (small and w_hh.ndim == 4)  # (ndim 4: panels; else np.dot's)
    run_tasks(_direction_steps, directions, (kind, gx, h0, c0, w_hh, b_hh, w_hr, y.reshape(steps * batch, -1), h_n,
                                             c_n, zeros, (steps, batch, hidden, gate_rows), batch_first), serial)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _direction_steps(d, kind, gx, h0, c0, w_hh, b_hh, w_hr, yf, h_n, c_n, zeros, dims, batch_first):
    """Direction d's steps of recurrent_layer (backwards for d = 1), from its input projection gx[d]: each a
    product of the hidden state (h @ W_hh^T) and the gate arithmetic, row by row; its columns of y, h_n[d]
    (and c_n[d])."""
    steps, batch, hidden, gate_rows = dims
    width = h0.shape[2]
    projected = w_hr.shape[0] > 0
    h_full = np.empty((batch, hidden), gx.dtype)
    gh = np.empty((batch, gate_rows), gx.dtype)
    w_hh_packed = _pack(w_hh[d])
    w_hr_packed = _pack(w_hr[d]) if projected else w_hh_packed
    h = h0[d].copy()
    c = c0[d].copy() if kind == LSTM else h_full  # (GRU and RNN have no cell state)
    for step in range(steps):
        t = steps - 1 - step if d == 1 else step
        _times(h, w_hh_packed, None, gh, zeros)  # (batch, gate_rows)
        for n in range(batch):
            row = gx[d, n * steps + t] if batch_first else gx[d, t * batch + n]
            ghn = gh[n]
            if kind == LSTM:
                for k in range(gate_rows):
                    ghn[k] += row[k]
                _lstm_cell(ghn, c[n], h_full[n], hidden)
            elif kind == GRU:
                for k in range(gate_rows):
                    ghn[k] += b_hh[d, k]
                _gru_cell(row, ghn, h[n], hidden)
            else:
                hn = h[n]
                for k in range(hidden):
                    v = row[k] + ghn[k]
                    hn[k] = np.tanh(v) if kind == RNN_TANH else (v if v > 0 else v * 0)
        if kind == LSTM:
            if projected:
                _times(h_full, w_hr_packed, None, h, zeros)
            else:
                h[:] = h_full
        for n in range(batch):
            out = yf[n * steps + t] if batch_first else yf[t * batch + n]
            hn = h[n]
            for k in range(width):
                out[d * width + k] = hn[k]
    h_n[d] = h
    if kind == LSTM:
        c_n[d] = c
