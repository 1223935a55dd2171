"""One layer of an LSTM, GRU or RNN over a whole sequence, in one or both directions (ir/ops/recurrent.py).

Per direction: the input projection of every time step is one sgemm (x @ W_ih^T + b_ih), then each
step is one small sgemm of the hidden state (h @ W_hh^T + b_hh) and the gate arithmetic, row by
row, in loops LLVM vectorises (vmath's sigmoid and tanh). The steps are sequential; the layer runs
on the calling thread (its matmuls are a few hidden-size rows: too small to share).

Operands as the op has them, with the direction first. The forward passes empty arrays (the
emptied() of an array of the same type) for what a kind does not have: c0 and c_n for GRU and RNN,
w_hr for an LSTM without projection; so one compiled signature serves every kind of a dtype.
"""

from __future__ import annotations

import numba
import numpy as np

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


@numba.njit(cache=True, nogil=True, error_model="numpy")
def recurrent_layer(kind, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, y, h_n, c_n, batch_first):
    """y, h_n (and c_n) of one layer; x (T, N, I), or (N, T, I) with batch_first; kind: KIND_CODES."""
    directions, gate_rows, features = w_ih.shape
    width = w_hh.shape[2]  # the hidden state's size: hidden, or an LSTM's proj_size
    hidden = gate_rows // (4 if kind == LSTM else 3 if kind == GRU else 1)
    if batch_first:
        batch, steps = x.shape[0], x.shape[1]
    else:
        steps, batch = x.shape[0], x.shape[1]
    rows = x.reshape(steps * batch, features)
    yf = y.reshape(steps * batch, directions * width)
    projected = w_hr.shape[0] > 0
    h_full = np.empty((batch, hidden), x.dtype)
    for d in range(directions):
        gx = np.dot(rows, w_ih[d].T)  # every step's input projection: (steps * batch, gate_rows)
        gx += b_ih[d]
        if kind != GRU:  # b_hh adds to the same sum; GRU's n gate multiplies its part by r
            gx += b_hh[d]
        w_hh_t = w_hh[d].T
        h = h0[d].copy()
        c = c0[d].copy() if kind == LSTM else h_full  # (GRU and RNN have no cell state)
        for step in range(steps):
            t = steps - 1 - step if d == 1 else step
            gh = np.dot(h, w_hh_t)  # (batch, gate_rows)
            for n in range(batch):
                row = gx[n * steps + t] if batch_first else gx[t * batch + n]
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
                    h = np.dot(h_full, w_hr[d].T)
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
