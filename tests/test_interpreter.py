"""compile(..., backend="interpreter"): lowering errors, input checking, release plan, profiling."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import torch
import torch.nn as nn

import compiler
from compiler.interpreter import Interpreter, _release_plan
from ir.errors import InputError, ModelFormatError, ShapeMismatchError, UnsupportedOperatorError
from tests.optest import export


def write_model(tmp_path, body: list[str], weights: dict[str, np.ndarray] | None = None):
    """A hand-written .pnnx.param (+ .pnnx.bin) in tmp_path."""
    operands = set()
    for line in body:
        tok = line.split()
        n_in, n_out = int(tok[2]), int(tok[3])
        operands.update(tok[4: 4 + n_in + n_out])
    param = tmp_path / "m.pnnx.param"
    param.write_text("7767517\n" + f"{len(body)} {len(operands)}\n" + "\n".join(body) + "\n")
    with zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w") as z:
        for name, arr in (weights or {}).items():
            z.writestr(name, arr.tobytes())
    return param


RELU_MODEL = [
    "pnnx.Input in 0 1 0 #0=(2,3)f32",
    "nn.ReLU act 1 1 0 1 #0=(2,3)f32 #1=(2,3)f32",
    "pnnx.Output out 1 0 1",
]


def test_handwritten_model_runs(tmp_path):
    m = compiler.compile(write_model(tmp_path, RELU_MODEL), backend="interpreter")
    assert [(s.name, s.shape, s.dtype) for s in m.inputs] == [("in0", (2, 3), "float32")]
    assert [s.name for s in m.outputs] == ["out0"]
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(m(x), np.maximum(x, 0))


def test_all_unsupported_operators_are_listed_at_once(tmp_path):
    body = [
        "pnnx.Input in 0 1 0 #0=(2,3)f32",
        "foo.Frobnicate f1 1 1 0 1",
        "nn.ReLU act 1 1 1 2",
        "foo.Frobnicate f2 1 1 2 3",
        "bar.Baz b1 1 1 3 4",
        "nn.Conv2d c 1 1 0 5 padding_mode=circularish in_channels=3 out_channels=3 kernel_size=(1,1) "
        "bias=False @weight=(3,3,1,1)f32",
        "pnnx.Output out 2 0 4 5",
    ]
    param = write_model(tmp_path, body, {"c.weight": np.zeros((3, 3, 1, 1), np.float32)})
    with pytest.raises(UnsupportedOperatorError) as info:
        compiler.compile(param)
    text = str(info.value)
    assert "foo.Frobnicate: f1, f2" in text
    assert "bar.Baz: b1" in text
    assert "nn.Conv2d (padding_mode=circularish): c" in text
    assert set(info.value.unsupported) == {"foo.Frobnicate", "bar.Baz", "nn.Conv2d (padding_mode=circularish)"}


def test_out_of_scope_operators_say_why(tmp_path):
    """Complex tensors, FFT, quantized and random ops and uninitialised memory are refused with a reason."""
    body = [
        "pnnx.Input in 0 1 0 #0=(2,8)f32",
        "torch.fft_rfft fft 1 1 0 1 dim=-1 n=None norm=backward",
        "torch.fft.ihfft2 fft2 1 1 0 7 dim=(-2,-1) s=None norm=backward",
        "torch.view_as_real vr 1 1 1 2",
        "torch.randn_like rnd 1 1 0 3",
        "Tensor.new_empty ne 1 1 0 4 size=(2,8)",
        "torch.quantize_per_tensor q 1 1 0 5 scale=0.1 zero_point=0 dtype=torch.quint8",
        "F.dropout drop 1 1 0 6 p=0.5 training=True",
        "pnnx.Output out 7 0 2 3 4 5 6 6 7",
    ]
    with pytest.raises(UnsupportedOperatorError) as info:
        compiler.compile(write_model(tmp_path, body), backend="interpreter")
    assert set(info.value.unsupported) == {
        "torch.fft_rfft (out of scope: FFT (complex spectra))",
        "torch.fft.ihfft2 (out of scope: FFT (complex spectra))",
        "torch.view_as_real (out of scope: complex tensors)",
        "torch.randn_like (out of scope: random numbers (the result would differ from torch's on every run))",
        "Tensor.new_empty (out of scope: uninitialised memory (torch leaves the values undefined))",
        "torch.quantize_per_tensor (out of scope: quantized tensors)",
        "F.dropout (out of scope: dropout in training mode is random; export the model in eval mode)",
    }


@pytest.mark.parametrize("backend", ["numba", "interpreter"])
def test_complex_inputs_are_out_of_scope_and_the_ops_after_them_are_listed_too(tmp_path, backend):
    """A valid file whose inputs are complex (pnnx's c64 / c128) is refused as unsupported, not malformed,
    with every unsupported operator of the model (the inputs' own refusal must not hide them)."""
    body = [
        "pnnx.Input in0 0 1 0 #0=(2,8)c64",
        "pnnx.Input in1 0 1 1 #1=(2,8)c128",
        "torch.view_as_real vr 1 1 0 2 #0=(2,8)c64 #2=(2,8,2)f32",
        "torch.istft st 1 1 1 3 n_fft=14",
        "pnnx.Output out 2 0 2 3",
    ]
    with pytest.raises(UnsupportedOperatorError) as info:
        compiler.compile(write_model(tmp_path, body), backend=backend)
    assert set(info.value.unsupported) == {
        "pnnx.Input (out of scope: complex tensors (c64 inputs))",
        "pnnx.Input (out of scope: complex tensors (c128 inputs))",
        "torch.view_as_real (out of scope: complex tensors)",
        "torch.istft (out of scope: FFT (complex spectra))",
    }
    assert info.value.unsupported["pnnx.Input (out of scope: complex tensors (c64 inputs))"] == ["in0"]


def test_a_bfloat16_model_is_refused_as_unsupported(tmp_path):
    body = ["pnnx.Input in0 0 1 0 #0=(1,4)bf16", "nn.ReLU r 1 1 0 1 #0=(1,4)bf16 #1=(1,4)bf16", "pnnx.Output out 1 0 1"]
    with pytest.raises(UnsupportedOperatorError, match="bfloat16 tensors; export the model in float32"):
        compiler.compile(write_model(tmp_path, body))


def test_shape_annotation_disagreement_is_reported(tmp_path):
    body = list(RELU_MODEL)
    body[1] = "nn.ReLU act 1 1 0 1 #0=(2,3)f32 #1=(2,4)f32"
    with pytest.raises(ShapeMismatchError, match=r"m.pnnx.param:4: nn.ReLU act, operand 1: shape \(2,4\) per pnnx"):
        compiler.compile(write_model(tmp_path, body))


def test_dynamic_input_compiles_per_shape_or_for_input_shapes(tmp_path):
    body = list(RELU_MODEL)
    body[0] = "pnnx.Input in 0 1 0 #0=(?,3)f32"
    body[1] = "nn.ReLU act 1 1 0 1 #0=(?,3)f32 #1=(?,3)f32"
    param = write_model(tmp_path, body)
    dynamic = compiler.compile(param)  # compiled at each new shape's first call
    assert dynamic.inputs[0].shape == (None, 3)
    np.testing.assert_array_equal(dynamic(np.full((2, 3), -1.0, np.float32)), np.zeros((2, 3), np.float32))
    with pytest.raises(InputError, match=r"gives in0 shape \(5, 3, 1\), the model declares \(\?,3\)"):
        compiler.compile(param, input_shapes={"in0": (5, 3, 1)})
    m = compiler.compile(param, input_shapes={"in0": (5, 3)})
    assert m.inputs[0].shape == (5, 3)
    assert m(np.ones((5, 3), np.float32)).shape == (5, 3)


def test_missing_model_file_is_a_format_error(tmp_path):
    with pytest.raises(ModelFormatError, match="no such file"):
        compiler.compile(tmp_path / "absent.pnnx.param")
    with pytest.raises(ModelFormatError, match="expected a .pnnx.param"):
        compiler.compile(tmp_path / "model.onnx")


def test_unknown_backend_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown backend 'tvm'"):
        compiler.compile(write_model(tmp_path, RELU_MODEL), backend="tvm")


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x, y):
        a = torch.relu(self.conv(x))
        return a * y, torch.sigmoid(a)


@pytest.fixture(scope="module")
def two_inputs():
    torch.manual_seed(0)
    module = TwoInputs().eval()
    x, y = torch.randn(2, 3, 7, 9), torch.randn(2, 4, 7, 9)
    with torch.no_grad():
        expected = [t.numpy() for t in module(x, y)]
    return export(module, x, y), x.numpy(), y.numpy(), expected


def test_run_with_names_matches_call(two_inputs):
    param, x, y, expected = two_inputs
    m = compiler.compile(param, backend="interpreter")
    a, b = m(x, y)
    np.testing.assert_allclose(a, expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b, expected[1], rtol=1e-5, atol=1e-5)
    (only_b,) = m.run(["out1"], {"in0": x, "in1": y})
    np.testing.assert_array_equal(only_b, b)
    assert len(m.run(None, {"in0": x, "in1": y})) == 2


def test_input_errors_name_the_input_and_expectation(two_inputs):
    param, x, y, _ = two_inputs
    m = compiler.compile(param, backend="interpreter")
    with pytest.raises(InputError, match=r"expected 2 input\(s\) \(in0 \(2, 3, 7, 9\), in1 \(2, 4, 7, 9\)\), got 1"):
        m(x)
    with pytest.raises(InputError, match=r"input in1: expected shape \(2, 4, 7, 9\) float32, got shape \(2, 4, 7\)"):
        m(x, y[..., 0])
    with pytest.raises(InputError, match=r"in0 \(2, 3, 7, 9\), in1 \(2, 4, 7, 8\): the model cannot take these "
                                         r"shapes: pnnx.Expression .*shapes \(2, 4, 7, 9\), \(2, 4, 7, 8\) "
                                         r"do not broadcast\): pnnx_expr_0"):
        m(x, y[..., :8])
    with pytest.raises(InputError, match="input in0: expected dtype float32, got int64"):
        m(x.astype(np.int64), y)
    with pytest.raises(InputError, match="input in0: expected a numpy array, got list"):
        m(x.tolist(), y)
    with pytest.raises(InputError, match=r"cannot feed 'y': there is no value or node named 'y'"):
        m.run(None, {"in0": x, "y": y})
    with pytest.raises(InputError, match=r"no value or node named 'out7'"):
        m.run(["out7"], {"in0": x, "in1": y})


def test_other_float_dtypes_and_strided_inputs_are_converted_not_misread(two_inputs):
    param, x, y, expected = two_inputs
    m = compiler.compile(param, backend="interpreter")
    a64, _ = m(x.astype(np.float64), y)
    np.testing.assert_allclose(a64, expected[0], rtol=1e-5, atol=1e-5)
    x_fortran = np.asfortranarray(x)
    y_strided = np.repeat(y, 2, axis=3)[..., ::2]  # non-contiguous view with the right values
    np.testing.assert_array_equal(y_strided, y)
    a, _ = m(x_fortran, y_strided)
    np.testing.assert_allclose(a, expected[0], rtol=1e-5, atol=1e-5)


def test_outputs_are_owned_arrays(two_inputs):
    param, x, y, _ = two_inputs
    m = compiler.compile(param, backend="interpreter")
    a, b = m(x, y)
    assert a.flags.writeable and a.flags.c_contiguous and a.base is None


def test_intermediates_are_released_after_their_last_use(two_inputs):
    param, *_ = two_inputs
    m = compiler.compile(param, backend="interpreter")
    plan = _release_plan(m.graph, m.order)
    released = [v for step in plan for v in step]
    intermediates = [v for n in m.graph.nodes for v in n.outputs if v not in m.graph.outputs]
    assert sorted(v.name for v in released) == sorted(v.name for v in intermediates)
    position = {n: i for i, n in enumerate(m.order)}
    for step, values in enumerate(plan):
        for v in values:
            readers = [position[n] for n in m.graph.nodes if v in n.inputs]
            assert step == max(readers, default=position[v.producer])


def test_every_run_records_step_stats(two_inputs):
    param, x, y, _ = two_inputs
    m = compiler.compile(param, backend="interpreter")
    assert isinstance(m, Interpreter) and m.last_step_stats == []
    m(x, y)
    stats = m.last_step_stats
    assert [s.node for s in stats] == [n.name for n in m.order]
    assert all(s.end >= s.start for s in stats)
    assert all(a.end <= b.start for a, b in zip(stats, stats[1:]))  # one thread, in order
    assert {s.op for s in stats} >= {"conv2d", "relu", "sigmoid"}
    for s, node in zip(stats, m.order):
        assert s.shapes == tuple(v.shape for v in node.outputs)
        assert s.nbytes == sum(v.type.size * np.dtype(v.dtype).itemsize for v in node.outputs)
