"""Tests for compiler.pnnx_format: the pnnx param/bin reader."""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
import pytest

from compiler.pnnx_format import (
    OperandInfo,
    load_pnnx,
    parse_param_text,
    parse_param_value,
)
from ir.errors import ModelFormatError, UnsupportedOperatorError

EXAMPLE = """\
7767517
7 12
pnnx.Input               pnnx_input_0             0 1 0 #0=(1,3,16,16)f32
nn.Conv2d                convbn2d_0               1 1 0 1 bias=True dilation=(1,1) groups=1 in_channels=3 kernel_size=(3,3) out_channels=8 padding=(1,1) padding_mode=zeros stride=(1,1) @bias=(8)f32 @weight=(8,3,3,3)f32 $input=0 #0=(1,3,16,16)f32 #1=(1,8,16,16)f32
pnnx.Expression          pnnx_expr_6              2 1 3 2 4 expr=add(@0,mul(@1,1.5)) #3=(1,8,16,16)f32 #2=(1,8,16,16)f32 #4=(1,8,16,16)f32
torch.mean               torch.mean_1             1 1 5 6 dim=(2) keepdim=False $input=5 #5=(1,8,256)f32 #6=(1,8)f32
torch.chunk              torch.chunk_4            1 2 6 7 8 chunks=2 dim=1 $input=6 #6=(1,8)f32 #7=(1,4)f32 #8=(1,4)f32
prim::TupleConstruct     pnnx_26                  2 1 10 11 12 #10=(1,4)f32 #11=(1,8)f32
pnnx.Output              pnnx_output_0            1 0 12
"""


def write_model(tmp_path: Path, ops: list[str], entries: dict[str, bytes] | None = None,
                n_ops: int | None = None, n_operands: int | None = None, **zip_kw) -> Path:
    """Write m.pnnx.param (counts computed unless given) and, if entries, m.pnnx.bin."""
    names: set[str] = set()
    for op in ops:
        tok = op.split()
        n = int(tok[2]) + int(tok[3])
        names.update(tok[4:4 + n])
    header = f"7767517\n{len(ops) if n_ops is None else n_ops} "
    header += f"{len(names) if n_operands is None else n_operands}\n"
    param = tmp_path / "m.pnnx.param"
    param.write_text(header + "\n".join(ops) + "\n")
    if entries is not None:
        write_zip(tmp_path / "m.pnnx.bin", entries, **zip_kw)
    return param


def write_zip(path: Path, entries: dict[str, bytes], compression: int = zipfile.ZIP_STORED,
              force_zip64: bool = False) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = compression
            with zf.open(info, "w", force_zip64=force_zip64) as f:
                f.write(data)


LINEAR = "nn.Linear                layer1.0.fc              1 1 0 1 bias=True @weight=(2,3)f32 @bias=(2)f32 #0=(1,3)f32 #1=(1,2)f32"
W = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.array([-1.5, 2.5], dtype=np.float32)
LINEAR_ENTRIES = {"layer1.0.fc.weight": W.tobytes(), "layer1.0.fc.bias": B.tobytes()}


# ---------------------------------------------------------------- param values


@pytest.mark.parametrize(("text", "value"), [
    ("None", None), ("()", None), ("[]", None), ("True", True), ("False", False),
    ("0", 0), ("-3", -3), ("1.5", 1.5), ("1.000000e-5", 1e-5), ("-2.5e+03", -2500.0),
    ("inf", math.inf), ("-inf", -math.inf), ("(1,2)", (1, 2)), ("[1,2]", (1, 2)),
    ("(2)", (2,)), ("(1,-2.5,abc)", (1, -2.5, "abc")), ("(2.000000e+00,3.0)", (2.0, 3.0)),
    ("zeros", "zeros"), ("bilinear", "bilinear"), ("torch.float", "torch.float"),
    ("iljk,l->ijk", "iljk,l->ijk"), ("('a','b')", ("a", "b")), ("(a,b)", ("a", "b")),
    ("(1,None,True)", (1, None, True)), ("%n", "%n"), ("(1,%n)", "(1,%n)"), ("", ""),
    ("1.000000e+00+2.000000e+00j", 1 + 2j),
])
def test_parse_param_value(text: str, value: object) -> None:
    got = parse_param_value(text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text", ["nan", "-nan", "nan.0"])
def test_parse_param_value_nan(text: str) -> None:
    got = parse_param_value(text)
    assert isinstance(got, float) and math.isnan(got)


# ---------------------------------------------------------------- param text


def test_example_params_operands_and_attr_decls() -> None:
    ops, operands, decls = parse_param_text(EXAMPLE, "ex.param")
    assert [op.type for op in ops][:3] == ["pnnx.Input", "nn.Conv2d", "pnnx.Expression"]
    conv = ops[1]
    assert (conv.name, conv.inputs, conv.outputs, conv.line) == ("convbn2d_0", ["0"], ["1"], 4)
    assert conv.input_names == ["input"]
    assert conv.params == {
        "bias": True, "dilation": (1, 1), "groups": 1, "in_channels": 3,
        "kernel_size": (3, 3), "out_channels": 8, "padding": (1, 1),
        "padding_mode": "zeros", "stride": (1, 1),
    }
    assert conv.attrs == {}
    assert decls == {("convbn2d_0", "bias"): ((8,), "f32"),
                     ("convbn2d_0", "weight"): ((8, 3, 3, 3), "f32")}
    expr = ops[2]
    assert expr.params == {"expr": "add(@0,mul(@1,1.5))"}
    assert expr.inputs == ["3", "2"] and expr.input_names == ["", ""]
    assert ops[3].params == {"dim": (2,), "keepdim": False}
    assert ops[4].params == {"chunks": 2, "dim": 1} and ops[4].outputs == ["7", "8"]
    assert ops[6].inputs == ["12"] and ops[6].outputs == []
    assert operands["0"] == OperandInfo("0", (1, 3, 16, 16), "f32")
    assert operands["6"] == OperandInfo("6", (1, 8), "f32")
    assert "12" not in operands  # never annotated


def test_list_like_expr_is_kept_raw() -> None:
    text = "7767517\n1 2\npnnx.Expression e 1 1 0 1 expr=[size(@0,0),-1]\n"
    ops, _, _ = parse_param_text(text)
    assert ops[0].params["expr"] == "[size(@0,0),-1]"


def test_dynamic_and_symbolic_dims_and_null_dtype() -> None:
    text = ("7767517\n2 2\npnnx.Input in 0 1 0 #0=(1,3,?,%w)f32\n"
            "Tensor.to t 1 1 0 1 dtype=torch.long #1=(?)null\n")
    _, operands, _ = parse_param_text(text)
    assert operands["0"].shape == (1, 3, None, None)
    assert operands["1"] == OperandInfo("1", (None,), None)


def test_blank_lines_are_ignored_but_lines_still_count() -> None:
    text = "7767517\n1 1\n\npnnx.Input in 0 1 0\n\n"
    ops, _, _ = parse_param_text(text)
    assert ops[0].line == 4


def test_repeated_input_gets_names_in_order() -> None:
    text = "7767517\n1 2\nfoo f 2 1 0 0 1 $a=0 $b=0\n"
    ops, _, _ = parse_param_text(text)
    assert ops[0].input_names == ["a", "b"]


# ---------------------------------------------------------------- loading


def test_load_weights_are_read_only_views(tmp_path: Path) -> None:
    param = write_model(tmp_path, ["pnnx.Input in 0 1 0", LINEAR], LINEAR_ENTRIES)
    model = load_pnnx(param)
    assert model.bin_path == str(tmp_path / "m.pnnx.bin")
    fc = model.operators[1]
    assert fc.name == "layer1.0.fc"
    assert list(fc.attrs) == ["weight", "bias"]
    np.testing.assert_array_equal(fc.attrs["weight"], W)
    np.testing.assert_array_equal(fc.attrs["bias"], B)
    for arr in fc.attrs.values():
        assert arr.flags.writeable is False
        with pytest.raises(ValueError):
            arr[0] = 1


def test_zip64_archive(tmp_path: Path) -> None:
    param = write_model(tmp_path, [LINEAR], LINEAR_ENTRIES, force_zip64=True)
    raw = (tmp_path / "m.pnnx.bin").read_bytes()
    with zipfile.ZipFile(tmp_path / "m.pnnx.bin") as zf:
        for info in zf.infolist():  # zip64 extras in the local headers only
            local_extra_len = int.from_bytes(raw[info.header_offset + 28:][:2], "little")
            assert local_extra_len > 0 and not info.extra
    fc = load_pnnx(param).operators[0]
    np.testing.assert_array_equal(fc.attrs["weight"], W)
    np.testing.assert_array_equal(fc.attrs["bias"], B)


def test_compressed_entries_fall_back_to_read(tmp_path: Path) -> None:
    param = write_model(tmp_path, [LINEAR], LINEAR_ENTRIES, compression=zipfile.ZIP_DEFLATED)
    fc = load_pnnx(param).operators[0]
    np.testing.assert_array_equal(fc.attrs["weight"], W)
    assert fc.attrs["weight"].flags.writeable is False


@pytest.mark.parametrize(("dtype", "np_dtype"), [
    ("f16", np.float16), ("f64", np.float64), ("i64", np.int64), ("i8", np.int8),
    ("u8", np.uint8), ("bool", np.bool_), ("c64", np.complex64), ("i32", np.int32),
])
def test_attr_dtypes(tmp_path: Path, dtype: str, np_dtype: type) -> None:
    data = np.array([[1, 0, 1], [0, 1, 1]]).astype(np_dtype)
    line = f"pnnx.Attribute a.b 0 1 0 @data=(2,3){dtype} #0=(2,3){dtype}"
    param = write_model(tmp_path, [line], {"a.b.data": data.tobytes()})
    arr = load_pnnx(param).operators[0].attrs["data"]
    assert arr.dtype == np_dtype and arr.shape == (2, 3)
    np.testing.assert_array_equal(arr, data)


@pytest.mark.parametrize("data, shape", [(np.float32(2.25).tobytes(), ()), (b"", (0,))])
def test_zero_dim_attribute(tmp_path: Path, data: bytes, shape: tuple) -> None:
    """Today's pnnx stores a 0-d attribute's one value; older ones stored nothing (read as empty)."""
    param = write_model(tmp_path, ["pnnx.Attribute a.b 0 1 0 @data=()f32 #0=()f32"], {"a.b.data": data})
    arr = load_pnnx(param).operators[0].attrs["data"]
    assert arr.shape == shape and (arr.size == 0 or arr[()] == np.float32(2.25))


def test_explicit_bin_path_and_missing_bin_without_attrs(tmp_path: Path) -> None:
    param = write_model(tmp_path, ["pnnx.Input in 0 1 0 #0=(1)f32"])
    assert load_pnnx(param).operators[0].attrs == {}  # no m.pnnx.bin needed
    write_zip(tmp_path / "other.bin", LINEAR_ENTRIES)
    param = write_model(tmp_path, [LINEAR])
    model = load_pnnx(str(param), tmp_path / "other.bin")
    np.testing.assert_array_equal(model.operators[0].attrs["bias"], B)


# ---------------------------------------------------------------- real pnnx exports


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory):
    torch = pytest.importorskip("torch")
    pnnx = pytest.importorskip("pnnx")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.layer1 = nn.Sequential(nn.Conv2d(8, 4, 1, bias=False), nn.ReLU())

        def forward(self, x):
            return self.layer1(self.conv(x) * 1.5).mean(dim=(2, 3))

    torch.manual_seed(0)
    net = Net().eval()
    d = tmp_path_factory.mktemp("export")
    x = torch.randn(1, 3, 16, 16)
    pnnx.export(net, str(d / "static.pt"), (x,))
    pnnx.export(net, str(d / "dynamic.pt"), (x,), (torch.randn(1, 3, 20, 12),))
    state = {k: v.numpy() for k, v in net.state_dict().items()}
    return d, state


def test_real_export_weights_bit_exact(exported) -> None:
    d, state = exported
    model = load_pnnx(d / "static.pnnx.param")
    ops = {op.name: op for op in model.operators}
    conv, inner = ops["conv"], ops["layer1.0"]
    assert conv.type == "nn.Conv2d" and conv.params["kernel_size"] == (3, 3)
    for key, arr in [("conv.weight", conv.attrs["weight"]), ("conv.bias", conv.attrs["bias"]),
                     ("layer1.0.weight", inner.attrs["weight"])]:
        assert arr.dtype == state[key].dtype and arr.shape == state[key].shape
        assert arr.tobytes() == state[key].tobytes()
        assert arr.flags.writeable is False
    inp = model.operators[0]
    assert inp.type == "pnnx.Input"
    assert model.operands[inp.outputs[0]] == OperandInfo(inp.outputs[0], (1, 3, 16, 16), "f32")


def test_real_export_dynamic_dims(exported) -> None:
    d, _ = exported
    model = load_pnnx(d / "dynamic.pnnx.param")
    inp = model.operators[0]
    assert model.operands[inp.outputs[0]].shape == (1, 3, None, None)
    assert model.operands[model.operators[-1].inputs[0]].shape == (1, 4)


# ---------------------------------------------------------------- errors


def expect_error(param: Path | str, line: int | None, *words: str, path: Path | None = None,
                 **kw) -> ModelFormatError:
    with pytest.raises(ModelFormatError) as info:
        load_pnnx(param, **kw)
    err = info.value
    assert err.path == str(path or param)
    assert err.line == line
    for w in words:
        assert w in str(err), str(err)
    return err


def write_text(tmp_path: Path, text: str) -> Path:
    param = tmp_path / "m.pnnx.param"
    param.write_text(text)
    return param


def test_missing_param_file(tmp_path: Path) -> None:
    expect_error(tmp_path / "nope.pnnx.param", None, "not found")


def test_param_file_not_utf8(tmp_path: Path) -> None:
    param = tmp_path / "m.pnnx.param"
    param.write_bytes(b"7767517\n0 0\n\xff\xfe\n")
    expect_error(param, None, "cannot read")


def test_missing_bin_file(tmp_path: Path) -> None:
    param = write_model(tmp_path, [LINEAR])
    expect_error(param, None, "not found", path=tmp_path / "m.pnnx.bin")


@pytest.mark.parametrize("text", ["", "7767518\n0 0\n", "hello\n", "\n7767517\n"])
def test_bad_magic(tmp_path: Path, text: str) -> None:
    expect_error(write_text(tmp_path, text), 1, "magic")


@pytest.mark.parametrize("counts", ["", "13", "a b", "1 2 3", "-1 2"])
def test_bad_counts_line(tmp_path: Path, counts: str) -> None:
    expect_error(write_text(tmp_path, f"7767517\n{counts}\n"), 2, "counts")


def test_operator_count_mismatch(tmp_path: Path) -> None:
    param = write_model(tmp_path, ["pnnx.Input in 0 1 0"], n_ops=2)
    expect_error(param, 2, "2 operator(s)", "has 1")


def test_operand_count_mismatch(tmp_path: Path) -> None:
    param = write_model(tmp_path, ["pnnx.Input in 0 1 0", "nn.ReLU r 1 1 0 1"], n_operands=3)
    expect_error(param, 2, "3 operand(s)", "2 distinct")


@pytest.mark.parametrize(("line", "words"), [
    ("nn.ReLU relu 1", ["token(s)"]),
    ("nn.ReLU relu x 1 0 1", ["not non-negative integers"]),
    ("nn.ReLU relu 1 -1 0 1", ["not non-negative integers"]),
    ("nn.ReLU relu 1 1 0", ["lists only 1 operand name(s)"]),
    ("nn.ReLU relu 1 1 0 #0=(1)f32", ["lists only 1 operand name(s)"]),
    ("nn.ReLU relu 1 1 0 1 inplace", ["bad token 'inplace'"]),
    ("nn.ReLU relu 1 1 0 1 =3", ["bad token '=3'"]),
    ("nn.ReLU relu 1 1 0 1 @=(1)f32", ["bad token"]),
    ("nn.ReLU relu 1 1 0 1 #0=1,2f32", ["bad shape annotation"]),
    ("nn.ReLU relu 1 1 0 1 #0=(1,x)f32", ["bad dimension 'x'"]),
    ("nn.ReLU relu 1 1 0 1 #0=(1,2)", ["bad shape annotation"]),
    ("nn.ReLU relu 1 1 0 1 #0=(1,2)f33", ["unknown dtype 'f33'"]),
    ("nn.ReLU relu 1 1 0 1 @w=(?,2)f32", ["bad dimension '?'"]),
    ("nn.ReLU relu 1 1 0 1 @w=(2)null", ["unknown dtype 'null'"]),
    ("nn.ReLU relu 1 1 0 1 @w=(2)c32", ["'c32'", "no numpy equivalent"]),
    ("nn.ReLU relu 1 1 0 1 $input=1", ["not an input"]),
    ("nn.ReLU relu 1 1 0 1 #7=(1)f32", ["neither its input nor its output"]),
    ("nn.ReLU relu 1 1 0 1 #0=(1)f32 #0=(2)f32", ["annotated here as (2)f32", "(1)f32 on line 3"]),
])
def test_bad_operator_line(tmp_path: Path, line: str, words: list[str]) -> None:
    text = f"7767517\n2 2\npnnx.Input in 0 1 0 #0=(1)f32\n{line}\n"
    expect_error(write_text(tmp_path, text), 4, *words)


@pytest.mark.parametrize("line", ["nn.ReLU relu 1 1 0 1 #0=(1)f32 #1=(1)bf16", "nn.ReLU relu 1 1 0 1 @w=(2)bf16"])
def test_bfloat16_is_refused_as_unsupported_not_malformed(tmp_path: Path, line: str) -> None:
    """pnnx writes bf16 for a bfloat16 model (a valid file): refused naming the operator and what to do."""
    text = f"7767517\n2 2\npnnx.Input in 0 1 0 #0=(1)f32\n{line}\n"
    with pytest.raises(UnsupportedOperatorError) as info:
        parse_param_text(text, "m.pnnx.param")
    assert info.value.unsupported == {"nn.ReLU (out of scope: bfloat16 tensors; export the model in float32)": ["relu"]}


def test_duplicate_operator_name(tmp_path: Path) -> None:
    param = write_model(tmp_path, ["pnnx.Input a.b 0 1 0", "nn.ReLU a.b 1 1 0 1"])
    expect_error(param, 4, "duplicate operator name 'a.b'", "line 3")


def test_disagreeing_annotations_across_lines(tmp_path: Path) -> None:
    param = write_model(tmp_path, ["pnnx.Input in 0 1 0 #0=(1,3)f32",
                                   "nn.ReLU r 1 1 0 1 #0=(1,3)f16 #1=(1,3)f32"])
    expect_error(param, 4, "'0'", "(1,3)f16", "(1,3)f32 on line 3")


def test_missing_bin_entry(tmp_path: Path) -> None:
    param = write_model(tmp_path, [LINEAR], {"layer1.0.fc.weight": W.tobytes()})
    expect_error(param, None, "missing entry 'layer1.0.fc.bias'", "@bias", "'layer1.0.fc'",
                 f"{param}:3", path=tmp_path / "m.pnnx.bin")


def test_entry_size_mismatch(tmp_path: Path) -> None:
    entries = dict(LINEAR_ENTRIES, **{"layer1.0.fc.weight": W.tobytes()[:-4]})
    param = write_model(tmp_path, [LINEAR], entries)
    expect_error(param, None, "'layer1.0.fc.weight'", "20 bytes", "expected 24",
                 path=tmp_path / "m.pnnx.bin")


@pytest.mark.parametrize("data", [b"", b"not a zip at all", b"PK\x03\x04" + b"\0" * 40])
def test_corrupt_zip(tmp_path: Path, data: bytes) -> None:
    param = write_model(tmp_path, [LINEAR])
    (tmp_path / "m.pnnx.bin").write_bytes(data)
    expect_error(param, None, "zip", path=tmp_path / "m.pnnx.bin")


def test_corrupt_local_header(tmp_path: Path) -> None:
    param = write_model(tmp_path, [LINEAR], LINEAR_ENTRIES)
    bin_path = tmp_path / "m.pnnx.bin"
    raw = bytearray(bin_path.read_bytes())
    raw[0:4] = b"XXXX"  # first local header; the central directory is intact
    bin_path.write_bytes(bytes(raw))
    expect_error(param, None, "corrupt zip entry", path=bin_path)
