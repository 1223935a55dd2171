"""Hand-edited model files: every inconsistency between params, weights and shapes is a ModelFormatError
naming the file, the line and the operator, never a bare Python error and never a silent run."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler import ModelFormatError

SHIPPED = Path(__file__).resolve().parents[1] / "compiler" / "data" / "tiny_cnn.pnnx.param"
CONV = "bias=True dilation=(1,1) groups=1 in_channels=3 kernel_size=(3,3) out_channels=8 padding=(1,1) " \
       "padding_mode=zeros stride=(1,1)"


def edited(tmp_path: Path, old: str, new: str) -> Path:
    text = SHIPPED.read_text()
    assert old in text
    param = tmp_path / "m.pnnx.param"
    param.write_text(text.replace(old, new, 1))
    shutil.copy(SHIPPED.with_suffix(".bin"), tmp_path / "m.pnnx.bin")
    return param


@pytest.mark.parametrize("old, new, message", [
    ("stride=(1,1)", "stride=(0,0)", r"stride 0 .* must be positive"),
    ("dilation=(1,1)", "dilation=(0,0)", r"dilation 0 must be positive"),
    ("padding=(1,1)", "padding=(-5,1)", r"padding -5\+-5 not negative"),
    ("kernel_size=(3,3)", "kernel_size=(0,0)", r"kernel_size=\(0, 0\) disagrees with @weight \(8, 3, 3, 3\)"),
    ("kernel_size=(3,3)", "kernel_size=(5,5)", r"kernel_size=\(5, 5\) disagrees with @weight"),
    ("in_channels=3", "in_channels=4", r"in_channels=4 disagrees with @weight \(8, 3, 3, 3\) \(groups=1\), "
                                       r"which gives 3"),
    ("out_channels=8", "out_channels=9", r"out_channels=9 disagrees"),
    ("groups=1", "groups=0", r"groups=0 is not a positive int"),
    ("bias=True", "bias=False", r"param bias=False but the module has @bias"),
])
@pytest.mark.parametrize("backend", ["interpreter", "numba"])
def test_a_bad_conv_param_names_file_line_and_operator(tmp_path, old, new, message, backend):
    param = edited(tmp_path, CONV, CONV.replace(old, new))
    with pytest.raises(ModelFormatError, match=rf"m.pnnx.param:4: nn.Conv2d convbn2d_0: .*{message}"):
        compiler.compile(param, backend=backend, cache=False)


def test_a_linear_whose_features_disagree_with_its_weight(tmp_path):
    param = edited(tmp_path, "in_features=16", "in_features=17")
    with pytest.raises(ModelFormatError, match=r"m.pnnx.param:16: nn.Linear fc: param in_features=17 disagrees "
                                               r"with @weight \(10, 16\)"):
        compiler.compile(param, backend="interpreter")


def test_a_pool_with_stride_0(tmp_path):
    param = edited(tmp_path, "return_indices=False stride=(2,2)", "return_indices=False stride=(0,0)")
    with pytest.raises(ModelFormatError, match=r"m.pnnx.param:6: nn.MaxPool2d stem.3: .*must be positive"):
        compiler.compile(param, backend="interpreter")


def test_an_expression_nested_5000_deep(tmp_path):
    deep = "@0"
    for _ in range(5000):
        deep = f"neg({deep})"
    param = edited(tmp_path, "expr=add(@0,@1)", f"expr=add({deep},@1)")
    with pytest.raises(ModelFormatError, match=r"m.pnnx.param:12: pnnx.Expression pnnx_expr_1: .*nested deeper "
                                               r"than 200"):
        compiler.compile(param, backend="interpreter")


def test_the_unedited_file_still_runs(tmp_path):
    param = edited(tmp_path, CONV, CONV)
    m = compiler.compile(param, backend="interpreter")
    assert m(np.zeros((1, 3, 32, 32), np.float32)).shape == (1, 10)
