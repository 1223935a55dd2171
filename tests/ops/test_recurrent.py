"""Recurrent layers (nn.LSTM, nn.GRU, nn.RNN), checked against torch through pnnx."""

import numpy as np
import pytest
import torch
import torch.nn as nn

from ir.op_registry import get_op
from ir.types import TensorType
from tests.codegen.rules import read_only
from tests.optest import check_module


class LSTMs(nn.Module):
    """Stacks, both directions, projections, batch_first, no bias, initial states fed on."""

    def __init__(self):
        super().__init__()
        self.plain = nn.LSTM(7, 5)
        self.stack = nn.LSTM(5, 6, num_layers=3, bias=False)
        self.proj = nn.LSTM(6, 5, num_layers=2, bidirectional=True, proj_size=3)
        self.proj_again = nn.LSTM(6, 5, num_layers=2, bidirectional=True, proj_size=3)
        self.first = nn.LSTM(7, 4, num_layers=2, batch_first=True, bidirectional=True)
        self.first_proj = nn.LSTM(8, 4, batch_first=True, proj_size=2, bias=False)

    def forward(self, x, y):
        x0, (h0, c0) = self.plain(x)
        x1, _ = self.stack(x0)
        x2, (h2, c2) = self.proj(x1)
        x3, (h3, c3) = self.proj_again(x2, (h2, c2))
        y0, (h4, c4) = self.first(y)
        y1, (h5, c5) = self.first_proj(y0, (h4[1:2, :, :2] - 0.5, c4[:1] * 0.5 + 0.2))
        return x1, x2, x3, h0, c0, h2, c2, h3, c3, y0, h4, c4, y1, h5, c5


def test_lstm_stacks_directions_projections_and_states():
    check_module(LSTMs(), torch.randn(9, 2, 7), torch.randn(3, 5, 7))


class WideLSTM(nn.Module):
    """Products big enough for linear_packed's threads (the projection and each step), several
    weight panels with a partial last one, a projection."""

    def __init__(self):
        super().__init__()
        self.wide = nn.LSTM(300, 150, batch_first=True)  # 600 gate rows: 18 panels of 32, the last partial
        self.proj = nn.LSTM(150, 200, proj_size=170, batch_first=True)

    def forward(self, x):
        y, (h, c) = self.wide(x)
        z, (hp, cp) = self.proj(y)
        return y, h, c, z, hp, cp


def test_wide_lstm_with_a_projection():
    check_module(WideLSTM(), torch.randn(3, 5, 300) * 0.3)


class GRUs(nn.Module):
    def __init__(self):
        super().__init__()
        self.plain = nn.GRU(7, 5)
        self.stack = nn.GRU(5, 6, num_layers=3, bias=False)
        self.both = nn.GRU(6, 4, num_layers=2, bidirectional=True)
        self.both_again = nn.GRU(6, 4, num_layers=2, bidirectional=True)
        self.first = nn.GRU(7, 3, num_layers=2, batch_first=True, bidirectional=True, bias=False)

    def forward(self, x, y, h):
        x0, h0 = self.plain(x)
        x1, h1 = self.stack(x0)
        x2, h2 = self.both(x1)
        x3, h3 = self.both_again(x1, h2)
        y0, h4 = self.first(y, h)
        return x0, x1, x2, x3, h0, h1, h2, h3, y0, h4


def test_gru_stacks_directions_and_states():
    check_module(GRUs(), torch.randn(8, 3, 7), torch.randn(2, 6, 7), torch.randn(4, 2, 3))


class RNNs(nn.Module):
    def __init__(self):
        super().__init__()
        self.plain = nn.RNN(7, 5)
        self.stack = nn.RNN(5, 6, num_layers=3, nonlinearity="tanh", bias=False)
        self.relu = nn.RNN(6, 4, num_layers=2, nonlinearity="relu", bidirectional=True)
        self.tanh = nn.RNN(6, 4, num_layers=2, bidirectional=True)
        self.first = nn.RNN(7, 3, num_layers=2, nonlinearity="relu", batch_first=True, bidirectional=True)

    def forward(self, x, y):
        x0, h0 = self.plain(x)
        x1, h1 = self.stack(x0)
        x2, h2 = self.relu(x1)
        x3, h3 = self.tanh(x1, h2)
        y0, h4 = self.first(y)
        return x0, x1, x2, x3, h0, h1, h2, h3, y0, h4


def test_rnn_tanh_relu_stacks_and_directions():
    check_module(RNNs(), torch.randn(8, 3, 7), torch.randn(2, 6, 7))


class Unbatched(nn.Module):
    """2-D inputs (seq, features) and 2-D states (layers * directions, hidden)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 4, num_layers=2, bidirectional=True, proj_size=3, batch_first=True)
        self.gru = nn.GRU(5, 4, batch_first=True)
        self.rnn = nn.RNN(5, 4, num_layers=2, nonlinearity="relu")

    def forward(self, x, h, c):
        a, (ha, ca) = self.lstm(x, (h, c))
        b, hb = self.gru(x)
        d, hd = self.rnn(x, torch.zeros(2, 4) + 0.1)
        return a, ha, ca, b, hb, d, hd


def test_unbatched_inputs_and_states():
    check_module(Unbatched(), torch.randn(6, 5), torch.randn(4, 3), torch.randn(4, 4))


class SomeOutputs(nn.Module):
    """pnnx drops unused outputs and orders an LSTM's by first use: shapes tell them apart."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 4, num_layers=2)
        self.proj = nn.LSTM(5, 4, proj_size=2)
        self.gru = nn.GRU(5, 4, bidirectional=True)
        self.rnn = nn.RNN(5, 4, num_layers=3)
        self.step = nn.LSTM(5, 4)  # one step, one layer: output and h_n have one shape and one value

    def forward(self, x, s):
        _, (h_only, _) = self.lstm(x)
        _, (_, c_only) = self.proj(x)
        y, (h, c) = self.proj(x * 2)
        c_first = c * 2  # pnnx lists this LSTM's outputs as c_n, output, h_n
        _, h_gru = self.gru(x)
        _, h_rnn = self.rnn(x)
        step, _ = self.step(s)
        _, (h_step, _) = self.step(s + 1)
        return h_only, c_only, c_first, y, h, h_gru, h_rnn, step, h_step


def test_only_some_outputs_used_and_out_of_order():
    param = check_module(SomeOutputs(), torch.randn(7, 3, 5), torch.randn(1, 3, 5)).read_text()
    three_outputs = [line for line in param.splitlines() if line.startswith("nn.LSTM") and " 1 3 " in line]
    assert len(three_outputs) == 1
    shapes = [t.split("=")[1] for t in three_outputs[0].split() if t.startswith("#")][1:]
    assert shapes == ["(1,3,4)f32", "(7,3,2)f32", "(1,3,2)f32"]  # c_n, output, h_n


@pytest.mark.parametrize("op,gates", [("lstm", 4), ("gru", 3), ("rnn", 1)])
def test_shape_rule_refuses_mismatched_weights(op, gates):
    x, h0 = TensorType((5, 2, 3)), TensorType((1, 2, 4))
    weights = [TensorType((1, gates * 4, 3)), TensorType((1, gates * 4, 5)), TensorType((1, gates * 4)),
               TensorType((1, gates * 4))]
    states = [h0, h0] if op == "lstm" else [h0]
    with pytest.raises(ValueError, match="w_hh"):
        get_op(op).infer_types([x, *states, *weights], {"batch_first": False, "nonlinearity": "tanh"}
                               if op == "rnn" else {"batch_first": False})


def test_references_keep_float32():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 2, 3), dtype=np.float32)
    h0 = np.zeros((2, 2, 5), np.float32)
    w_ih, w_hh = rng.standard_normal((2, 15, 3), dtype=np.float32), rng.standard_normal((2, 15, 5), dtype=np.float32)
    b = np.zeros((2, 15), np.float32)
    y, h_n = get_op("gru").run([x, h0, w_ih, w_hh, b, b], {"batch_first": False})
    assert y.dtype == h_n.dtype == np.float32 and y.shape == (4, 2, 10) and h_n.shape == (2, 2, 5)


@pytest.mark.parametrize("packed, dtype", [(True, np.float32), (False, np.float32), (False, np.float64)])
@pytest.mark.parametrize("batch, hidden", [(1, 40), (7, 40), (3, 21), (13, 21), (13, 96)])
def test_lstm_kernel_on_packed_raw_and_float64_weights(packed, dtype, batch, hidden):
    """recurrent_layer itself: weights laid out at compile time (pack_directions) on the microkernel,
    raw float32 weights (a weight computed in the graph) and float64 through np.dot; against torch.
    160 gate rows are 5 whole panels, 84 end in a partial one; batches of 7 and 13 rows end in a
    partial group of the microkernel's MR rows, 1 and 3 are fewer rows than a group. The two directions run
    as two tasks where each step's products are small (packed float32 weights), one after the other where
    they are not (13 rows by 96 -> 384: a product for the threads, linear_packed) or np.dot's."""
    from codegen.kernels.recurrent import KIND_CODES, pack_directions, recurrent_layer

    torch.manual_seed(batch)
    lstm = nn.LSTM(10, hidden, bidirectional=True, batch_first=True).double()
    x = torch.randn(batch, 6, 10, dtype=torch.float64)
    y_ref, (h_ref, c_ref) = lstm(x)
    params = dict(lstm.named_parameters())

    def stacked(name):
        return np.stack([params[name].detach().numpy(), params[name + "_reverse"].detach().numpy()]).astype(dtype)

    w_ih, w_hh, b_ih, b_hh = (stacked(f"{kind}_l0") for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
    if packed:  # as a forward passes its constants: read-only (and so the signature a model with states compiles)
        w_ih, w_hh, b_ih, b_hh = map(read_only, (pack_directions(w_ih), pack_directions(w_hh), b_ih, b_hh))
    h0 = np.zeros((2, batch, hidden), dtype)
    y, h_n, c_n = np.empty((batch, 6, 2 * hidden), dtype), np.empty_like(h0), np.empty_like(h0)
    recurrent_layer(KIND_CODES["lstm"], x.numpy().astype(dtype), h0, h0.copy(), w_ih, w_hh, b_ih, b_hh, w_hh[:0],
                    y, h_n, c_n, True)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, y_ref.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(h_n, h_ref.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(c_n, c_ref.detach().numpy(), rtol=tol, atol=tol)


def test_recurrent_products_call_linear_packed_with_a_linear_layers_argument_types():
    """A recurrent layer's products on the microkernel call linear_packed with the argument types a
    forward's linear layer passes it (read-only weight and bias, an empty 2-d view for no residual,
    int64 codes: codegen/emit/gemm.py), whether its panels were packed at compile time (read-only)
    or at run time, with a bias or without: so a model with an LSTM compiles no signature of that
    kernel tree for it alone. The wrappers are not cached, so calling them types linear_packed's call
    again (and records its signature); the products against float64."""
    import numba
    from numba.core import types

    from codegen.kernels.gemm import linear_packed
    from codegen.kernels.recurrent import _times, pack_directions

    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 48)).astype(np.float32)  # 64 x 48 x 300 multiply-adds: linear_packed's path
    w = rng.standard_normal((1, 300, 48)).astype(np.float32)
    bias = rng.standard_normal(300).astype(np.float32)
    panels = pack_directions(w)[0]  # writable: packed at run time
    out = np.empty((64, 300), np.float32)
    zeros = np.zeros(300, np.float32)
    numba.njit(lambda a, p, b, o, z: _times(a, p, b, o, z))(a, panels, bias, out, zeros)
    np.testing.assert_allclose(out, a.astype(np.float64) @ w[0].T.astype(np.float64) + bias, rtol=1e-4, atol=1e-4)
    numba.njit(lambda a, p, o, z: _times(a, p, None, o, z))(a, panels, out, zeros)
    np.testing.assert_allclose(out, a.astype(np.float64) @ w[0].T.astype(np.float64), rtol=1e-4, atol=1e-4)
    assert linear_packed.signatures
    for sig in linear_packed.signatures:
        weight, b, residual, act = sig[1], sig[2], sig[3], sig[5]
        assert not weight.mutable and isinstance(b, types.Array) and not b.mutable, sig
        assert isinstance(residual, types.Array) and residual.ndim == 2 and act == types.int64, sig
