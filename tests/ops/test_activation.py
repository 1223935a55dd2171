"""Activations through pnnx against torch: nn.* children, F.* / torch.* / Tensor.* spellings,
large magnitudes, and torch.clamp with number and tensor bounds."""

import numpy as np
import pytest
import scipy.special
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


_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772, 1.0507009873554805


def _sigmoid64(x):
    return np.exp(-np.logaddexp(0.0, -x))


# Each activation of test_reference_*: (op, attrs, torch, float64 closed form, (f(-inf), f(+inf))).
# The closed forms are evaluated in float64 from the definitions (exact to far below float32's
# precision on the test points); the limits are the mathematical ones, written out.
EXTREME_CASES = [
    ("sigmoid", {}, torch.sigmoid, _sigmoid64, (0.0, 1.0)),
    ("silu", {}, F.silu, lambda x: x * _sigmoid64(x), (0.0, np.inf)),
    ("logsigmoid", {}, F.logsigmoid, lambda x: -np.logaddexp(0.0, -x), (-np.inf, 0.0)),
    ("gelu", {}, F.gelu, lambda x: 0.5 * x * scipy.special.erfc(-x / np.sqrt(2.0)), (0.0, np.inf)),
    ("mish", {}, F.mish, lambda x: x * np.tanh(np.logaddexp(0.0, x)), (0.0, np.inf)),
    ("softplus", {}, F.softplus, lambda x: np.logaddexp(0.0, x), (0.0, np.inf)),
    ("elu", {"alpha": 0.5}, lambda t: F.elu(t, 0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x)), (-0.5, np.inf)),
    ("selu", {}, F.selu, lambda x: _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(x)),
     (-_SELU_SCALE * _SELU_ALPHA, np.inf)),
    ("celu", {"alpha": 2.0}, lambda t: F.celu(t, 2.0),
     lambda x: np.maximum(x, 0) + np.minimum(2.0 * np.expm1(x / 2), 0), (-2.0, np.inf)),
    ("hardswish", {}, F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6, (0.0, np.inf)),
    ("softsign", {}, F.softsign, lambda x: x / (1 + np.abs(x)), (-1.0, 1.0)),
]
# torch's float32 gelu computes 1 + erf(x), which cancels for x < -2 (ours is exact, checked against
# float64 above): 1.3e-4 relative at x = -3 with ATen's AVX-512 erf, less with its AVX2 one
TORCH_RTOL = {"gelu": 3e-4}

FINITE_EXTREMES = np.array([-1e30, -1e4, -100.0, -87.0, -20.0, -3.0, -1e-3, 0.0, 1e-3, 3.0, 20.0, 87.0, 100.0,
                            1e4, 1e30], np.float32)


@pytest.mark.parametrize("op, attrs, torch_fn, exact, limits", EXTREME_CASES, ids=[c[0] for c in EXTREME_CASES])
def test_reference_on_finite_extremes(op, attrs, torch_fn, exact, limits):
    """Finite inputs up to the overflow range (exp overflows float32 at 88.7), against the float64
    closed form and against torch (no export). atol: below 1e-12 torch flushes to 0 what we round
    to a denormal (sigmoid(-100) is 3.8e-44)."""
    x = FINITE_EXTREMES
    got = _reference(op, x, **attrs)
    assert got.dtype == np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        expected = exact(x.astype(np.float64))
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-12, err_msg=f"{op} against float64")
    np.testing.assert_allclose(got, torch_fn(torch.from_numpy(x)).numpy(), rtol=TORCH_RTOL.get(op, 1e-6),
                               atol=1e-12, err_msg=f"{op} against torch")


def _limit_cases():
    for op, attrs, _, _, (at_minus, at_plus) in EXTREME_CASES:
        for side, x, limit in (("-inf", -np.inf, at_minus), ("+inf", np.inf, at_plus), ("nan", np.nan, np.nan)):
            yield pytest.param(op, attrs, x, limit, id=f"{op}({side})")


@pytest.mark.parametrize("op, attrs, x, limit", list(_limit_cases()))
def test_reference_at_infinities_and_nan(op, attrs, x, limit):
    """f(+-inf) is the mathematical limit and f(nan) is nan, written out (not torch's answer: torch's
    vectorized kernels differ per ISA there, e.g. its AVX-512 gelu(+inf) is nan)."""
    got = _reference(op, np.array([x, 1.0, x], np.float32), **attrs)  # a vector of 3: not only the scalar path
    assert got.dtype == np.float32
    np.testing.assert_allclose(got[[0, 2]], np.float32(limit), rtol=1e-6, atol=0, equal_nan=True,
                               err_msg=f"{op}({x})")


class PReLUs(nn.Module):
    """PReLU alone and inside elementwise arithmetic (which the compiler fuses into one loop with
    the prelu). pnnx writes a prelu with a constant weight as nn.PReLU (nn.LeakyReLU for one
    parameter, even spelled F.prelu), so F.prelu takes its weight as a second input here. The
    modules' weights differ per channel and have both signs, so a weight broadcast against the
    wrong dim gives wrong numbers; no prelu node is shared between two outputs."""

    def __init__(self, num_parameters: int):
        super().__init__()
        self.alone = nn.PReLU(num_parameters)
        self.chained = nn.PReLU(num_parameters)
        with torch.no_grad():
            self.alone.weight.copy_(torch.linspace(-0.8, 1.3, num_parameters) if num_parameters > 1 else 0.3)
            self.chained.weight.copy_(torch.linspace(1.2, -0.6, num_parameters) if num_parameters > 1 else -0.4)

    def forward(self, x, w):
        return self.alone(x), self.chained(x) * 2 + 1, F.prelu(x, w), F.prelu(x + 1, w) - 1


PRELU_OUTPUTS = ["nn.PReLU(x)", "nn.PReLU(x) * 2 + 1", "F.prelu(x, w)", "F.prelu(x + 1, w) - 1"]


@pytest.mark.parametrize("shape", [(3, 5), (2, 5, 7), (2, 5, 3, 4)], ids=["NC", "NCL", "NCHW"])
@pytest.mark.parametrize("num_parameters", [1, 5])
def test_prelu_alone_and_fused(num_parameters, shape):
    """num_parameters 1 and C, on 2-D (N, C), 3-D (N, C, L) and 4-D (N, C, H, W) inputs."""
    w = torch.linspace(-0.5, 0.9, num_parameters) if num_parameters > 1 else torch.tensor([0.25])
    param = check_module(PReLUs(num_parameters), torch.randn(*shape) * 3, w, labels=PRELU_OUTPUTS)
    written = [line.split()[0] for line in param.read_text().splitlines()[2:]]
    module_op = "nn.PReLU" if num_parameters > 1 else "nn.LeakyReLU"
    assert written.count(module_op) == 2 and written.count("F.prelu") == 2, written


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
    with pytest.raises(ValueError, match="does not broadcast"):  # the lowering shapes torch's weight (C, 1)
        get_op("prelu").infer_types([f32, TensorType((4,), "float32")], {})
    assert get_op("prelu").infer_types([f32, TensorType((4, 1), "float32")], {}) == [f32]
    with pytest.raises(ValueError, match="None is not allowed"):  # a missing bound is infinite
        get_op("clamp").normalize_attrs({"min": None})
    with pytest.raises(ValueError, match="floating-point"):
        get_op("sigmoid").infer_types([TensorType((2,), "int64")], {})
    assert get_op("prelu").infer_types([f32, TensorType((1,), "float32")], {}) == [f32]
