"""Activations through pnnx against torch: nn.* children, F.* / torch.* / Tensor.* spellings,
large magnitudes, and torch.clamp with number and tensor bounds."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ir.op_registry import get_op
from ir.types import TensorType
from tests.optest import check_module


class Children(nn.Module):
    """Each activation as a child module, so pnnx writes the nn.* op."""

    def __init__(self):
        super().__init__()
        self.acts = nn.ModuleList([
            nn.ReLU(), nn.ReLU6(), nn.LeakyReLU(), nn.LeakyReLU(0.2), nn.SiLU(), nn.Sigmoid(), nn.Tanh(),
            nn.GELU(), nn.GELU("tanh"), nn.Hardswish(), nn.Hardsigmoid(), nn.Mish(), nn.ELU(), nn.ELU(0.5),
            nn.Hardtanh(), nn.Hardtanh(-2, 3), nn.Softplus(), nn.Softplus(2, 1), nn.SELU(), nn.CELU(0.7),
            nn.Softsign(), nn.Tanhshrink(), nn.LogSigmoid(), nn.Hardshrink(0.3), nn.Softshrink(0.4),
            nn.Threshold(0.1, 20.0), nn.RReLU(0.1, 0.3), nn.PReLU(5), nn.PReLU(),
        ])
        with torch.no_grad():
            self.acts[-2].weight.copy_(torch.linspace(-1, 1, 5))
            self.acts[-1].weight.fill_(0.3)  # pnnx writes a 1-parameter PReLU as nn.LeakyReLU

    def forward(self, x):
        return tuple(act(x) for act in self.acts)


def test_module_spellings():
    acts = Children().acts
    param = check_module(Children(), torch.randn(2, 5, 7, 9) * 4, labels=[repr(a) for a in acts])
    written = {line.split()[0] for line in param.read_text().splitlines()[2:]}
    assert {f"nn.{type(a).__name__}" for a in acts} <= written


class Functional(nn.Module):
    def forward(self, x):
        w = torch.tensor([0.1, -0.2, 0.3])
        return (
            F.relu(x), torch.relu(x), x.relu(), F.relu6(x), nn.ReLU6()(x),
            F.leaky_relu(x), F.leaky_relu(x, 0.3), F.leaky_relu(x, -1.5),
            F.silu(x), x * torch.sigmoid(x), F.sigmoid(x), torch.sigmoid(x), x.sigmoid(),
            F.tanh(x), torch.tanh(x), x.tanh(), F.gelu(x), F.gelu(x, approximate="tanh"),
            F.hardswish(x), F.hardsigmoid(x), F.mish(x), F.elu(x), F.elu(x, 0.7),
            F.hardtanh(x), F.hardtanh(x, -0.5, 0.25), F.softplus(x), F.softplus(x, beta=2, threshold=5),
            F.selu(x), F.celu(x, 1.3), F.softsign(x), F.tanhshrink(x), F.logsigmoid(x),
            F.hardshrink(x, 0.6), F.softshrink(x), F.threshold(x, -0.5, 7.0), F.rrelu(x, 0.2, 0.4),
            F.prelu(x, w),
        )


@pytest.mark.parametrize("shape", [(2, 3, 13, 11), (3, 3, 7)])
def test_functional_spellings(shape):
    check_module(Functional(), torch.randn(*shape) * 3)


def test_large_magnitudes_keep_relative_accuracy():
    """Up to +-88 (where exp overflows float32), to float32 precision. atol=1e-12 only because
    torch's float32 gelu(-8) is 0 where the true value (ours) is -4.9e-15."""
    x = torch.tensor([-88.0, -80.0, -50.0, -30.0, -20.0, -8.0, -1e-3, 0.0, 1e-3, 8.0, 20.0, 30.0, 50.0, 80.0, 88.0])
    check_module(Functional(), x.reshape(1, 3, 5), rtol=2e-6, atol=1e-12)


def _reference(op: str, x: np.ndarray, **attrs) -> np.ndarray:
    opdef = get_op(op)
    return opdef.run([x], opdef.normalize_attrs(attrs))[0]


@pytest.mark.parametrize("op, torch_fn, attrs, rtol", [
    ("sigmoid", torch.sigmoid, {}, 1e-6),
    ("silu", F.silu, {}, 1e-6),
    ("logsigmoid", F.logsigmoid, {}, 1e-6),
    ("gelu", F.gelu, {}, 1e-4),  # torch's float32 1 + erf(x) cancels for x < -2; ours is exact
    ("mish", F.mish, {}, 1e-6),
    ("softplus", F.softplus, {}, 1e-6),
    ("elu", lambda t: F.elu(t, 0.5), {"alpha": 0.5}, 1e-6),
    ("selu", F.selu, {}, 1e-6),
    ("celu", lambda t: F.celu(t, 2.0), {"alpha": 2.0}, 1e-6),
    ("hardswish", F.hardswish, {}, 1e-6),
    ("softsign", F.softsign, {}, 1e-6),
])
def test_reference_on_extremes(op, torch_fn, attrs, rtol):
    """Straight against torch (no export): infinities, nan and overflow-range inputs. Below
    atol torch flushes to 0 what we round to a denormal (sigmoid(-100) is 3.8e-44)."""
    x = np.array([-np.inf, -1e30, -1e4, -100.0, -87.0, -3.0, 0.0, 3.0, 87.0, 100.0, 1e4, 1e30, np.inf, np.nan],
                 np.float32)
    got = _reference(op, x, **attrs)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, torch_fn(torch.from_numpy(x)).numpy(), rtol=rtol, atol=1e-12)


class Clamps(nn.Module):
    def forward(self, x, lo, hi):
        return (
            torch.clamp(x, min=0.5), torch.clamp(x, max=-0.25), torch.clamp(x, -1, 1), torch.clamp(x, 0.2, -0.2),
            x.clamp(min=0), x.clamp(max=2.5), x.clip(-0.5, 0.5), torch.clip(x, min=-3),
            torch.clamp(x, min=lo), torch.clamp(x, max=hi), torch.clamp(x, lo, hi), torch.clamp(x, hi, lo),
        )


def test_clamp_number_and_tensor_bounds():
    x = torch.randn(2, 3, 7, 9) * 2
    lo, hi = torch.randn(3, 1, 9) - 1, torch.randn(7, 1) + 1
    check_module(Clamps(), x, lo, hi)


class IntClamps(nn.Module):
    def forward(self, x):
        return torch.clamp(x, min=-2), torch.clamp(x, -1, 3), torch.clamp(x, min=0.5), F.relu(x)


def test_clamp_of_int_tensor_types_like_torch():
    """An int tensor stays int with int bounds and becomes float32 with a float bound."""
    param = check_module(IntClamps(), torch.randint(-5, 6, (3, 4, 5)))
    assert "torch.clamp" in param.read_text()


def test_shape_rule_errors():
    f32 = TensorType((2, 4, 3), "float32")
    with pytest.raises(ValueError, match="4 channels"):
        get_op("prelu").infer_types([f32, TensorType((3,), "float32")], {})
    with pytest.raises(ValueError, match="min, max or both"):
        get_op("clamp").infer_types([f32], {"min": None, "max": None})
    with pytest.raises(ValueError, match="floating-point"):
        get_op("sigmoid").infer_types([TensorType((2,), "int64")], {})
    assert get_op("prelu").infer_types([f32, TensorType((1,), "float32")], {}) == [f32]
