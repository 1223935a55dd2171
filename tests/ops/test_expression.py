"""pnnx.Expression: the parser, torch's typing, the evaluator, and what pnnx writes for
torch arithmetic, comparisons and the elementwise ops it leaves as ops."""

import subprocess
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn

import compiler
from ir.errors import ModelFormatError, UnsupportedOperatorError
from ir.expr import Call, ListExpr, Literal, Ref, format_expression, parse_expression
from ir.op_registry import get_op
from ir.ops.expression import FUNCTIONS, evaluate_expression, fold_expression, type_expression
from ir.types import TensorType
from tests.optest import check_module, torch_outputs

# -- parser ----------------------------------------------------------------------------------


def test_parse_builds_the_ast():
    assert parse_expression("div(mul(add(@0,1),sub(@1,2.0)),3)") == Call("div", (
        Call("mul", (Call("add", (Ref(0), Literal(1))), Call("sub", (Ref(1), Literal(2.0))))), Literal(3)))
    assert parse_expression("[size(@0,0),-1]") == ListExpr((Call("size", (Ref(0), Literal(0))), Literal(-1)))
    assert parse_expression("@3") == Ref(3)


@pytest.mark.parametrize("text, value", [
    ("2", 2), ("-1", -1), ("2.0", 2.0), ("0.408248305", 0.408248305), ("1.000000e-8", 1e-8),
    ("1.23456792e8", 1.23456792e8), ("-inf", -np.inf), ("nan.0", np.nan),
    ("True", True), ("False", False), ("None", None),
])
def test_literals_keep_int_float_and_bool_apart(text, value):
    literal = parse_expression(text)
    assert isinstance(literal, Literal) and type(literal.value) is type(value)
    assert literal.value == value or np.isnan(value)


@pytest.mark.parametrize("text", [
    "add(@0,@1)", "sub(1,@0)", "mul(@0,1e-08)", "pow(@0,-inf)", "[size(@0,0),mul(6,size(@0,2)),-1]",
    "size(@0)", "int(size(@0,1))", "torch.float(@0)", "where(@0,@1,-0.5)", "or(and(@0,@1),xor(@0,True))",
])
def test_format_reads_back(text):
    assert format_expression(parse_expression(text)) == text


@pytest.mark.parametrize("scrambled, meant", [
    ("mul(log1p,@0),2", "mul(log1p(@0),2)"),
    ("add(mul(log1p,abs(@0)),2),@1", "add(mul(log1p(abs(@0)),2),@1)"),
    ("add(log1p,@0),expm1,@1", "add(log1p(@0),expm1(@1))"),
    ("expm1,@0", "expm1(@0)"),
])
def test_pnnx_scrambled_log1p_expm1_are_read_in_prefix_order(scrambled, meant):
    assert parse_expression(scrambled) == parse_expression(meant)


@pytest.mark.parametrize("text, message", [
    ("foo(@0)", "unknown function 'foo'"),
    ("add(@0)", "add takes 2 argument"),
    ("add(@0,@1", "end of expression"),
    ("add(@0,@1))", r"unexpected '\)'"),
    ("mul(@0,1.0+2.0j)", "complex literal"),
    ("mul(@0,$1)", "cannot read"),
    ("", "end of expression"),
])
def test_parse_errors_name_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        parse_expression(text)


def test_parse_is_cached():
    assert parse_expression("add(@0,2)") is parse_expression("add(@0,2)")


# -- typing and evaluation -------------------------------------------------------------------

_TORCH_NAMES = {"max": "maximum", "min": "minimum", "and": "bitwise_and", "or": "bitwise_or",
                "xor": "bitwise_xor", "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift"}
_RNG = np.random.default_rng(0)
_OPERANDS = {
    "float32": (_RNG.normal(0, 2, (2, 3, 4)).astype(np.float32), _RNG.normal(0, 2, (3, 1)).astype(np.float32)),
    "int64": (_RNG.integers(-9, 10, (2, 3, 4)), _RNG.integers(1, 5, (3, 1))),
    "bool": (_RNG.random((2, 3, 4)) > 0.5, _RNG.random((3, 1)) > 0.5),
}


@pytest.mark.parametrize("name", sorted(set(FUNCTIONS) - {"where"}))
def test_every_function_matches_torch(name):
    """Value and dtype of f(@0) / f(@0,@1) against torch, for each input dtype torch accepts
    (but square: torch squares bools to int64, pnnx never writes that, we keep bool)."""
    arity = get_op(FUNCTIONS[name]).arity()[0]
    checked = []
    for dtype, operands in _OPERANDS.items():
        arrays = operands[:arity]
        try:
            expected = getattr(torch, _TORCH_NAMES.get(name, name))(*map(torch.from_numpy, arrays)).numpy()
        except (RuntimeError, NotImplementedError):
            continue  # torch has no such kernel
        if (name, dtype) == ("square", "bool"):
            continue
        got = evaluate_expression(f"{name}({','.join(f'@{i}' for i in range(arity))})", arrays)
        assert got.dtype == expected.dtype, dtype
        np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6, err_msg=dtype)
        checked.append(dtype)
    assert checked


def _t(shape, dtype="float32"):
    return torch.from_numpy(_RNG.normal(0, 3, shape).astype(dtype))


@pytest.mark.parametrize("expr, torch_fn, inputs", [
    ("mul(@0,2.5)", lambda x: x * 2.5, [torch.arange(-3, 4)]),
    ("mul(@0,2)", lambda x: x * 2, [_t((3,), "float16")]),
    ("mul(@0,0.1)", lambda x: x * 0.1, [_t((5,))]),
    ("mul(@0,1e-40)", lambda x: x * 1e-40, [_t((5,))]),
    ("add(@0,@1)", lambda x, y: x + y, [_t((2, 3)), torch.tensor(0.25, dtype=torch.float64)]),
    ("add(@0,@1)", lambda x, y: x + y, [torch.arange(6, dtype=torch.int32), torch.tensor(0.5, dtype=torch.float64)]),
    ("add(@0,@1)", lambda x, y: x + y, [torch.arange(3), _t((3,))]),
    ("mul(@0,@1)", lambda x, y: x * y, [_t((3,), "float16"), torch.tensor(3)]),
    ("mul(@0,2)", lambda x: x * 2, [torch.tensor([True, False])]),
    ("div(@0,2)", lambda x: x / 2, [torch.arange(-3, 4)]),
    ("add(@0,1)", lambda x: x + 1, [torch.arange(4, dtype=torch.int32)]),
    ("sub(1,@0)", lambda x: 1 - x, [torch.arange(4, dtype=torch.uint8)]),
    ("pow(@0,0.5)", lambda x: x ** 0.5, [torch.arange(5)]),
    ("pow(2,@0)", lambda x: 2 ** x, [torch.arange(5)]),
    ("pow(2.5,@0)", lambda x: 2.5 ** x, [torch.arange(5)]),
    ("floor_divide(@0,3)", lambda x: x // 3, [torch.arange(-7, 8)]),
    ("remainder(@0,3)", lambda x: x % 3, [torch.arange(-7, 8)]),
    ("fmod(@0,-3)", lambda x: torch.fmod(x, -3), [torch.arange(-7, 8)]),
    ("where(@0,@1,0.5)", lambda c, x: torch.where(c, x, 0.5), [torch.tensor([True, False]), torch.arange(2)]),
    ("mul(@0,int(2.7))", lambda x: x * 2, [_t((4,))]),
    ("div(@0,torch.float(size(@0,1)))", lambda x: x / 3.0, [torch.arange(6).reshape(2, 3)]),
    ("add(mul(@0,pow(size(@0,1),-0.5)),size(@0,0))", lambda x: x * 3 ** -0.5 + 2, [_t((2, 3))]),
    ("div(mul(add(@0,1),sub(@1,2)),3)", lambda x, y: (x + 1) * (y - 2) / 3, [_t((2, 1, 5)), _t((4, 1))]),
])
def test_scalar_and_zero_dim_typing_follows_torch(expr, torch_fn, inputs):
    expected = torch_fn(*inputs).numpy()
    got = evaluate_expression(expr, [t.numpy() for t in inputs])
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)


def test_float_literal_is_rounded_to_float32_not_promoting():
    x = _RNG.normal(size=7).astype(np.float32)
    np.testing.assert_array_equal(evaluate_expression("mul(@0,0.1)", [x]), x * np.float32(0.1))


def test_identity_expression_returns_its_input():
    x = np.arange(3.0, dtype=np.float32)
    assert evaluate_expression("@0", [x]) is x


def test_fold_replaces_sizes_and_renumbers_inputs():
    expr = parse_expression("add(mul(@1,size(@0,1)),div(@1,mul(2,size(@0,-1))))")
    table = type_expression(expr, [TensorType((2, 3, 4)), TensorType((4,))])
    folded, used = fold_expression(expr, table)
    assert format_expression(folded) == "add(mul(@0,3),div(@0,8))" and used == [1]


def test_shape_lists_are_static_values():
    expr = parse_expression("[size(@0,0),mul(size(@0,1),4),-1]")
    assert type_expression(expr, [TensorType((2, 5, 16))])[expr].value == (2, 20, -1)


@pytest.mark.parametrize("expr, types, message", [
    ("add(@0,@1)", [(2, 3), (4,)], "do not broadcast"),
    ("add(@0,@2)", [(2, 3), (3,)], "@2 refers to input 2, but there are 2 inputs"),
    ("and(@0,1)", [(3,)], "bitwise op on float32"),
    ("[size(@0,0),-1]", [(2, 3)], "is a list"),
    ("add(@0,[1,2])", [(2,)], "not a list or None"),
    ("size(@0,3)", [(2, 3)], "rank-2 input at dim 3"),
    ("size(1,0)", [(2, 3)], "needs an input reference"),
])
def test_shape_rule_errors(expr, types, message):
    with pytest.raises(ValueError, match=message):
        get_op("expression").infer_types([TensorType(s) for s in types], {"expr": expr})


# -- through pnnx ----------------------------------------------------------------------------


class Arithmetic(nn.Module):
    def forward(self, x, y):
        return (
            x + y, x * 2, 1 - x, x / y, x ** 2, x ** 0.5, 2 ** x, (x + 1) * (y - 2) / 3,
            torch.add(x, y, alpha=2), x.sub(y, alpha=0.5), torch.rsub(x, 2), 1 / y, x * x.size(1) ** -0.5,
            torch.max(x, y), torch.min(x, y), torch.maximum(x, y), torch.minimum(x, y), torch.atan2(x, y),
            torch.fmod(x, y), torch.remainder(x, y), x % y, x // y, torch.floor_divide(x, y), torch.logaddexp(x, y),
            torch.pow(x, y), x.clone().add_(1).mul_(y), (x + 1) * (x + 1), x + x,
        )


def test_binary_arithmetic_broadcasts():
    check_module(Arithmetic(), torch.randn(2, 3, 7, 9), torch.randn(3, 1, 9) + 0.1)


class UnaryMath(nn.Module):
    def forward(self, x):
        p, u = x.abs() + 0.5, x.clamp(-0.9, 0.9)
        return (
            torch.sqrt(p), torch.exp(x), torch.abs(x), torch.neg(x), -x, torch.rsqrt(p), torch.floor(x),
            torch.ceil(x), torch.round(x), torch.trunc(x), torch.sign(x), torch.square(x), torch.reciprocal(p),
            torch.erf(x), torch.log(p), torch.log10(p), torch.sin(x), torch.cos(x), torch.tan(u), torch.asin(u),
            torch.acos(u), torch.atan(x), torch.sinh(x), torch.cosh(x), torch.asinh(x), torch.acosh(p + 1),
            torch.atanh(u), x.sqrt().exp().abs(), torch.exp(x * 10), torch.sqrt(x), torch.lgamma(x),
        )


def test_unary_math_chains():
    check_module(UnaryMath(), torch.randn(3, 13, 11) * 2, rtol=1e-5, atol=1e-5)


class IntArithmetic(nn.Module):
    def forward(self, a, b):
        return (
            a + 1, a * 2.5, a / 2, a // 3, a % 3, a - 1.5, a ** 2, a + b, a / b, a % b, -a, a.abs(),
            torch.sign(a), torch.maximum(a, b), a & 3, a | b, a ^ 2, a << 1, a >> 1, ~a,
            torch.bitwise_and(a, b), torch.bitwise_or(a, b), torch.bitwise_xor(a, b),
            torch.bitwise_left_shift(a, 2), torch.bitwise_right_shift(a, b), torch.positive(a),
        )


def test_integer_arithmetic_and_bitwise_ops():
    check_module(IntArithmetic(), torch.randint(-20, 20, (2, 5, 7)), torch.randint(1, 6, (5, 1)))


class Logic(nn.Module):
    def forward(self, x, y):
        gt, lt = x > y, x < 0.5
        return (
            gt, lt, x == y, x >= 0.5, x != y, x <= y, gt * 2, (x >= 0.5) * 3,
            torch.where(gt, x, y), torch.where(lt, x, 0.0), torch.where(gt, -1.5, y), x.masked_fill(gt, -1e4),
            torch.logical_and(gt, lt), torch.logical_or(gt, lt), torch.logical_xor(gt, lt), torch.logical_not(gt),
            gt & lt, gt | lt, gt ^ lt, ~gt,
        )


def test_comparisons_where_masked_fill_and_logic():
    x, y = torch.randn(2, 3, 7, 9), torch.randn(3, 1, 9)
    x[0, 0, 0, :] = y[0, 0, :]  # some equal elements for eq and ne
    check_module(Logic(), x, y)


class IntMaskedFill(nn.Module):
    def forward(self, a):
        return a.masked_fill(a > 0, 7), a.masked_fill(a < 0, 1.7)


def test_masked_fill_keeps_the_input_dtype():
    check_module(IntMaskedFill(), torch.randint(-5, 6, (4, 6)))


# -- hand-written and directly converted models -------------------------------------------------


def _compile_param(tmp_path, lines, operands, **kw):
    param = tmp_path / "m.pnnx.param"
    param.write_text(f"7767517\n{len(lines)} {operands}\n" + "\n".join(lines) + "\n")
    return compiler.compile(param, **kw)


def test_dynamic_shape_expressions_become_static(tmp_path):
    """pnnx keeps size() of '?' dims; with the input shape given, lists become constants and
    sizes inside arithmetic become literals."""
    model = _compile_param(tmp_path, [
        "pnnx.Input in 0 1 0 #0=(?,?,?)f32",
        "pnnx.Expression shape 1 1 0 1 expr=[size(@0,0),mul(size(@0,1),4),-1]",
        "pnnx.Expression e 1 1 0 2 expr=add(div(@0,size(@0,2)),mul(@0,floor_divide(size(@0,1),2))) #2=(?,?,?)f32",
        "pnnx.Output out 2 0 1 2",
    ], operands=3, input_shapes={"in0": (2, 5, 8)})
    x = np.random.default_rng(1).normal(size=(2, 5, 8)).astype(np.float32)
    shape, y = model(x)
    assert shape.dtype == np.int64 and shape.tolist() == [2, 20, -1]
    np.testing.assert_allclose(y, x / 8 + x * 2, rtol=1e-6)
    lowered = compiler.load_graph(tmp_path / "m.pnnx.param", {"in0": (2, 5, 8)})  # before optimisation
    assert 'expression(%in0) {expr="add(div(@0,8),mul(@0,2))"}' in str(lowered)


@pytest.mark.parametrize("expr, error, message", [
    ("[size(@0,0),int(@1)]", ModelFormatError, "output 2 is an index list, not tensors"),
    ("foo(@0,@1)", UnsupportedOperatorError, "unknown function 'foo'"),
])
def test_unsupported_expressions_are_reported(tmp_path, expr, error, message):
    with pytest.raises(error, match=message):
        _compile_param(tmp_path, [
            "pnnx.Input in 0 1 0 #0=(2,3)f32", "pnnx.Input in1 0 1 1 #1=(1)f32",
            f"pnnx.Expression e 2 1 0 1 2 expr={expr}", "pnnx.Output out 1 0 2",
        ], operands=3)


_PNNX_DTYPES = {torch.float32: "f32", torch.int64: "i64"}


def _export_raw(tmp_path, module, *inputs):
    """trace + the pnnx executable: pnnx.export raises once the .param is written when an
    aten::* op is left (its generated Python does not import), so check_module cannot be used."""
    import pnnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace is deprecated
        torch.jit.trace(module.eval(), inputs, check_trace=False).save(str(tmp_path / "m.pt"))
    shapes = ",".join(f"[{','.join(map(str, t.shape))}]{_PNNX_DTYPES[t.dtype]}" for t in inputs)
    subprocess.run([pnnx.EXEC_PATH, "m.pt", f"inputshape={shapes}"], cwd=tmp_path, capture_output=True, check=False)
    return (tmp_path / "m.pnnx.param").read_text(), compiler.compile(tmp_path / "m.pnnx.param")


class AtenLeftovers(nn.Module):
    def forward(self, x, y):
        return (
            torch.log1p(x.abs()) * 2 + y, torch.log1p(x.abs()) + torch.expm1(y), torch.expm1(x),
            torch.log2(x.abs() + 1), torch.exp2(x), torch.frac(x * 3), torch.erfc(x), torch.sgn(x),
            torch.hypot(x, y), torch.copysign(x, y), torch.fmax(x, y), torch.fmin(x, y),
            x.clamp_min(0.1), x.clamp_max(-0.2), torch.lerp(x, y, 0.3), torch.lerp(x, y, 0.75),
            torch.isnan(x.log()), torch.signbit(x),
        )


def test_aten_leftovers_and_scrambled_expressions(tmp_path):
    x, y = torch.randn(2, 3, 5), torch.randn(3, 1)
    text, model = _export_raw(tmp_path, AtenLeftovers(), x, y)
    assert "expr=add(mul(log1p,abs(@0)),2),@1" in text and "expr=expm1,@0" in text
    assert "aten::clamp_min" in text and "expr=0.1\n" in text  # the 0-input expression of its bound
    for i, (got, expected) in enumerate(zip(model(x.numpy(), y.numpy()), torch_outputs(AtenLeftovers(), (x, y)),
                                            strict=True)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")
