"""Data-movement ops against torch: reshapes, transposes, slicing, joins, splits,
expand/repeat, pixel shuffles, identities and pnnx.Attribute constants."""

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from ir.errors import UnsupportedOperatorError
from ir.op_registry import get_op
from ir.types import TensorType
from tests.optest import check_module, export


def _labels(module):
    return [f"{type(module).__name__}[{i}]" for i in range(64)]


class Reshapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.flat = nn.Flatten()

    def forward(self, x):  # x: (3, 1, 7, 9)
        return (
            x.view(3, -1),
            x.reshape(-1, 9),
            torch.reshape(x, (3, 7, 1, 9)),
            torch.flatten(x, 1),
            torch.flatten(x, 1, 2),
            torch.flatten(x),
            x.flatten(-2),
            self.flat(x),
            x.squeeze(),
            x.squeeze(1),
            torch.squeeze(x, -1),  # size 9: unchanged
            x.unsqueeze(0),
            torch.unsqueeze(x, -1),
            x[:, None],
            x.unflatten(2, (7, 1)),
            x[:1, :, :1, :1].reshape(()),  # to 0-d: pnnx writes shape=()
        )


def test_reshapes():
    m = Reshapes()
    check_module(m, torch.randn(3, 1, 7, 9), labels=_labels(m))


class Transposes(nn.Module):
    def forward(self, x):  # x: (2, 6, 7, 9)
        return (
            x.permute(0, 2, 3, 1),
            torch.permute(x, (3, 2, 1, 0)),
            x.transpose(1, -1),
            torch.transpose(x, 0, 2),
            x.flatten(1).t(),
            x.view(2, 2, 3, 7, 9).transpose(1, 2).reshape(2, 6, 7, 9),  # pnnx: nn.ChannelShuffle
        )


def test_transposes_and_channel_shuffle():
    m = Transposes()
    param = check_module(m, torch.randn(2, 6, 7, 9), labels=_labels(m))
    text = param.read_text()
    assert "nn.ChannelShuffle" in text and "torch.t " in text


class Slices(nn.Module):
    def forward(self, x):  # x: (2, 8, 9, 7)
        return (
            x[:, 1:6:2],
            x[:, :, -3:],
            x[..., ::3],
            x[:, 1:5, 2:-1, ::3],
            x[:, :, 1:100],
            x[:, -5:-1:2, 1:],
            x[:, 2],
            x[..., -1],
            x.select(2, 3),
            x[:, 2, 1:3],
            x[1, 2],
            x[0, :, 2:5, -1],
            x.narrow(1, -2, 2),
            torch.narrow(x, 3, 1, 4),
        )


def test_slices_and_selects():
    m = Slices()
    param = check_module(m, torch.randn(2, 8, 9, 7), labels=_labels(m))
    text = param.read_text()
    assert "selects=" in text and "Tensor.select" in text and "dim=" in text


class JoinsAndSplits(nn.Module):
    def forward(self, x, y):  # x: (2, 8, 9, 7), y: (2, 3, 9, 7)
        a, b, c = torch.chunk(x, 3, dim=1)  # 3, 3, 2
        d, e = x.chunk(2, -1)  # 4, 3
        f, g, h = torch.chunk(y[:, :, :6], 4, dim=2)  # 6 into 4 chunks: 2, 2, 2
        i, j = torch.split(x, [3, 5], dim=1)
        k, n, o = x.split(4, dim=2)  # 4, 4, 1
        u0, u1, u2 = y.unbind(1)
        return (
            torch.cat([x, y], dim=1),
            torch.cat((x[:, :3], y, y), dim=-3),
            torch.stack([y, y]),
            torch.stack((x[:, :3], y), dim=-1),
            a, b, c, d, e, f, g, h, i, j, k, n, o, u0, u1, u2,
        )


def test_joins_and_splits():
    m = JoinsAndSplits()
    check_module(m, torch.randn(2, 8, 9, 7), torch.randn(2, 3, 9, 7), labels=_labels(m))


class Repeats(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.randn(1, 5, 1, 1))
        self.weight = nn.Parameter(torch.randn(3, 5, 1, 7))

    def forward(self, x):  # x: (3, 5, 9, 7)
        return (
            x[:, :1].expand(-1, 4, -1, -1),
            self.bias.expand(3, 5, 9, 7),
            x[:, :, :1].expand(2, 3, 5, 9, 7),
            x[:, :1].expand_as(x),
            x.repeat(1, 2, 1, 3),
            x[0].repeat(2, 1, 1, 1),
            torch.tile(x, (2, 1)),
            torch.cat([self.weight, x[:, :, :1]], dim=2),
            self.bias,
        )


def test_expand_repeat_and_constants():
    m = Repeats()
    param = check_module(m, torch.randn(3, 5, 9, 7), labels=_labels(m))
    assert "pnnx.Attribute" in param.read_text()


class Shuffles(nn.Module):
    def __init__(self):
        super().__init__()
        self.shuffle = nn.PixelShuffle(3)
        self.unshuffle = nn.PixelUnshuffle(2)

    def forward(self, x):  # x: (2, 18, 5, 7)
        return (
            self.shuffle(x),
            F.pixel_shuffle(x, 3),
            F.pixel_shuffle(x[:, :8], 2),
            self.unshuffle(x[:, :, :4, :6]),
            F.pixel_unshuffle(x[:, :5, :3, :6], 3),
        )


def test_pixel_shuffle_and_unshuffle():
    m = Shuffles()
    check_module(m, torch.randn(2, 18, 5, 7), labels=_labels(m))


class Identities(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.drop2d = nn.Dropout2d(0.5)
        self.ident = nn.Identity()

    def forward(self, x):
        return (
            self.drop(x).permute(0, 2, 1),
            self.drop2d(x[:, :, :, None]).flatten(2),
            F.dropout(self.ident(x), 0.3, training=False).contiguous().transpose(1, 2),
            torch.clone(x),
            x.clone().transpose(0, 1),
        )


def test_identities():
    m = Identities()
    check_module(m, torch.randn(3, 5, 7), labels=_labels(m))


def test_pnnx_attribute_is_named_after_its_op():
    m = Repeats()
    param = export(m, torch.randn(3, 5, 9, 7))
    ir_text = str(compiler.load_graph(param))  # before constant folding merges them
    assert "bias.data" in ir_text and "weight.data" in ir_text


# -- shape rules ---------------------------------------------------------------------------


def _infer(op, shapes, **attrs):
    opdef = get_op(op)
    return opdef.infer_types([TensorType(s) for s in shapes], opdef.normalize_attrs(attrs))


@pytest.mark.parametrize("op, shapes, attrs, message", [
    ("reshape", [(2, 3)], {"shape": (4, 2)}, "6 elements"),
    ("reshape", [(2, 3)], {"shape": (-1, 3)}, "negative"),
    ("transpose", [(2, 3, 4)], {"perm": (0, 1, 1)}, "permutation"),
    ("concat", [(2, 3), (3, 3)], {"dim": 1}, "does not match"),
    ("concat", [(2, 3), (2, 3)], {"dim": 2}, "out of range"),
    ("split", [(2, 7)], {"dim": 1, "sizes": (3, 3)}, "add up"),
    ("slice", [(2, 7)], {"axes": (1,), "starts": (0,), "ends": (5,), "steps": (0,)}, "positive"),
    ("slice", [(2, 7)], {"axes": (1, -1), "starts": (0, 0), "ends": (5, 5), "steps": (1, 1)}, "repeat"),
    ("expand", [(2, 3)], {"shape": (4, 3)}, "cannot expand"),
    ("tile", [(2, 3)], {"repeats": (2,)}, "cover"),
    ("pixel_shuffle", [(1, 6, 3, 3)], {"upscale": 2}, "divisible"),
    ("pixel_unshuffle", [(1, 6, 3, 4)], {"downscale": 2}, "divisible"),
])
def test_shape_rule_errors(op, shapes, attrs, message):
    with pytest.raises(ValueError, match=message):
        _infer(op, shapes, **attrs)


def test_shape_rules_follow_python_slicing():
    (t,) = _infer("slice", [(5, 9)], axes=(1,), starts=(-4,), ends=(2**63 - 1,), steps=(2,))
    assert t.shape == (5, 2)
    (t,) = _infer("slice", [(5, 9)], axes=(0,), starts=(7,), ends=(9,), steps=(1,))
    assert t.shape == (0, 9)
    (t,) = _infer("concat", [(2, 3), (2, 4)], dim=-1)
    assert t.shape == (2, 7)


def test_concat_promotes_like_torch():
    opdef = get_op("concat")
    types = [TensorType((2, 3), "float32"), TensorType((2, 1), "int64"), TensorType((2, 1), "bool")]
    assert opdef.infer_types(types, {"dim": 1})[0] == TensorType((2, 5), "float32")
    assert opdef.infer_types(types[1:], {"dim": 1})[0].dtype == "int64"
    out = opdef.run([np.ones((2, 3), np.float32), np.full((2, 1), 7)], {"dim": 1})[0]
    assert out.dtype == np.float32 and out[0, 3] == 7


def test_references_do_not_modify_inputs():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x.flags.writeable = False
    out = get_op("pixel_shuffle").run([x.reshape(1, 4, 2, 3)], {"upscale": 2})[0]
    expected = F.pixel_shuffle(torch.from_numpy(x.reshape(1, 4, 2, 3).copy()), 2).numpy()
    np.testing.assert_array_equal(out, expected)
    pieces = get_op("split").run([x], {"dim": 2, "sizes": (1, 3)})
    assert [p.shape for p in pieces] == [(2, 3, 1), (2, 3, 3)]


# -- what we refuse ------------------------------------------------------------------------------


_DYNAMIC_RESHAPE = """7767517
4 3
pnnx.Input               pnnx_input_0             0 1 0 #0=(2,6,9)f32
pnnx.Input               pnnx_input_1             0 1 1 #1=(2)i64
Tensor.reshape           Tensor.reshape_1         2 1 0 1 2 $input=0 $shape=1 #0=(2,6,9)f32 #2=(12,9)f32
pnnx.Output              pnnx_output_0            1 0 2
"""


def test_reshape_to_a_runtime_shape_is_unsupported(tmp_path):
    param = tmp_path / "m.pnnx.param"
    param.write_text(_DYNAMIC_RESHAPE)
    with pytest.raises(UnsupportedOperatorError, match=r"Tensor.reshape.*\$shape depends on tensor values"):
        compiler.compile(param, backend="interpreter")


class SizeDependent(nn.Module):
    def forward(self, x):
        return (
            x.view(x.size(0), 6, -1),
            x[:, :, : x.size(2) // 2],
            F.interpolate(x, size=(x.size(2) * 2, x.size(3) + 1)),
            x.flatten(1),
        )


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.trace, which pnnx uses
def test_dynamic_export_compiles_at_the_given_shape(tmp_path, monkeypatch):
    """With two input shapes pnnx passes size-derived params as operands ($shape, $end, $size);
    they fold to constants once input_shapes fixes the shape."""
    import pnnx

    monkeypatch.chdir(tmp_path)
    module = SizeDependent().eval()
    with torch.no_grad():
        pnnx.export(module, "m.pt", (torch.rand(2, 6, 9, 11),), (torch.rand(3, 6, 12, 16),))
    text = (tmp_path / "m.pnnx.param").read_text()
    assert "$shape=" in text and "$end=" in text and "$size=" in text
    x = torch.randn(2, 6, 10, 12)
    model = compiler.compile(tmp_path / "m.pnnx.param", backend="interpreter", input_shapes={"in0": x.shape})
    for got, expected in zip(model(x.numpy()), module(x), strict=True):
        np.testing.assert_array_equal(got, expected.numpy())


_IDENTITIES = """7767517
6 5
pnnx.Input               pnnx_input_0             0 1 0 #0=(2,3)f32
nn.Dropout               drop                     1 1 0 1 p=0.5 #0=(2,3)f32 #1=(2,3)f32
nn.Identity              ident                    1 1 1 2 #1=(2,3)f32 #2=(2,3)f32
Tensor.contiguous        Tensor.contiguous_0      1 1 2 3 $input=2 #2=(2,3)f32 #3=(2,3)f32
F.dropout                F.dropout_0              1 1 3 4 p=0.1 training=False $input=3 #3=(2,3)f32 #4=(2,3)f32
pnnx.Output              pnnx_output_0            1 0 4
"""


def test_identity_spellings_become_aliases(tmp_path):
    """pnnx usually drops these ops itself; when one survives it costs no node."""
    param = tmp_path / "m.pnnx.param"
    param.write_text(_IDENTITIES)
    assert [n.op for n in compiler.load_graph(param).nodes] == ["copy"]  # the output gets its own value
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(compiler.compile(param, backend="interpreter")(x), x)
