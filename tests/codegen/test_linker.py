"""codegen/linker.py: a forward's kernels bound by address, not linked into its code."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

from codegen.linker import KernelFunction, KernelTable, LinkError, bind, link

KERNELS = '''
import numba
import numpy as np


@numba.njit(cache=True)
def scale(x, k, out):
    for i in range(x.size):
        out[i] = x[i] * k


@numba.njit(cache=True)
def total(x):
    if x[0] < 0:
        raise ValueError("negative first element")
    return x.sum()


@numba.njit(cache=True)
def offset(x, by=1.0):
    return x + by
'''

FORWARD = '''import numba
import numpy as np


@numba.njit(cache=True)
def forward(x):
    out = np.empty_like(x)
    scale(x, 2.0, out)  # float factor
    scale(out, np.int64(3), out)  # int factor: another signature of scale
    return total(out)
'''

ARGUMENTS = (np.ones(3),)  # what link() runs the forward on


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def kernels(tmp_path, request):
    path = tmp_path / "kernels.py"
    path.write_text(KERNELS)
    name = f"linker_test_kernels_{request.node.name}"
    yield _import(path, name)
    sys.modules.pop(name, None)


def _linked_forward(tmp_path: Path, kernels, source: str = FORWARD):
    linked = link(source, kernels, {"forward": ARGUMENTS})
    path = tmp_path / "forward.py"
    path.write_text(linked.source)
    forward = _import(path, f"{kernels.__name__}_forward").forward
    return linked, forward, bind(kernels, linked.table)


def test_each_kernel_signature_is_bound_once_and_op_lines_keep_their_text(tmp_path, kernels):
    linked, forward, bound = _linked_forward(tmp_path, kernels)
    assert [(ref.name, [str(t) for t in ref.signature.args]) for ref in linked.table] == [
        ("scale", ["array(float64, 1d, C)", "float64", "array(float64, 1d, C)"]),
        ("scale", ["array(float64, 1d, C)", "int64", "array(float64, 1d, C)"]),
        ("total", ["array(float64, 1d, C)"]),
    ]
    assert ("def forward(x, kernels):\n"
            "    scale = kernel(kernels, 0)\n"
            "    scale_2 = kernel(kernels, 1)\n"
            "    total = kernel(kernels, 2)\n") in linked.source
    assert "    scale(x, 2.0, out)  # float factor\n" in linked.source
    assert "    scale_2(out, np.int64(3), out)  # int factor: another signature of scale\n" in linked.source
    x = np.array([1.0, 2.0, 4.0])
    assert forward(x, bound) == 42.0


def test_the_forward_calls_its_kernels_by_address_without_their_code(tmp_path, kernels):
    _, forward, bound = _linked_forward(tmp_path, kernels)
    forward(np.ones(3), bound)
    (signature,) = forward.signatures
    assert isinstance(signature[-1], KernelTable)
    assert all(isinstance(f, KernelFunction) for f in signature[-1].functions)
    ir_text = forward.overloads[signature].library.get_llvm_str()
    # a direct call: no fallback through the Python C API at the call sites (numba's FunctionType has one)
    assert "PyGILState_Ensure" not in ir_text and "numba_get_wrapper" not in ir_text.lower()
    module = llvm.parse_assembly(ir_text)
    defined = {f.name for f in module.functions if not f.is_declaration}
    for dispatcher in (kernels.scale, kernels.total):
        for result in dispatcher.overloads.values():
            assert result.fndesc.mangled_name not in defined


def test_an_exception_in_a_kernel_propagates_through_the_forward(tmp_path, kernels):
    _, forward, bound = _linked_forward(tmp_path, kernels)
    with pytest.raises(ValueError, match="negative first element"):
        forward(np.array([-1.0, 2.0]), bound)


def test_a_kernel_call_with_an_omitted_default_is_refused(kernels):
    source = FORWARD.replace("return total(out)", "return offset(out)")
    with pytest.raises(LinkError, match="forward, line 10: pass every argument of offset by position"):
        link(source, kernels, {"forward": ARGUMENTS})


def test_a_kernel_call_with_a_keyword_is_refused(kernels):
    source = FORWARD.replace("return total(out)", "return offset(out, by=2.0)")
    with pytest.raises(LinkError, match="pass every argument of offset by position"):
        link(source, kernels, {"forward": ARGUMENTS})


def test_binding_names_something_that_is_not_a_kernel_fails(tmp_path, kernels):
    linked = link(FORWARD, kernels, {"forward": ARGUMENTS})
    kernels.scale = np.sum
    with pytest.raises(LinkError, match=r"\.scale is not a jitted kernel"):
        bind(kernels, linked.table)


def test_literal_constants_type_as_plain_ints_so_a_kernel_compiles_once_per_signature(tmp_path, kernels):
    source = FORWARD.replace("scale(out, np.int64(3), out)", "scale(out, 3, out)\n    scale(out, 5, out)")
    linked, forward, bound = _linked_forward(tmp_path, kernels, source)
    assert [str(ref.signature.args[1]) for ref in linked.table if ref.name == "scale"] == ["float64", "int64"]
    assert sorted(str(args[1]) for args in kernels.scale.overloads) == ["float64", "int64"]  # no Literal[int](3)
    assert forward(np.array([1.0, 2.0, 4.0]), bound) == 7.0 * 2 * 3 * 5


def test_a_kernel_compile_is_announced_and_a_cache_load_is_not(tmp_path, kernels, caplog):
    with caplog.at_level(logging.INFO, logger="codegen"):
        _linked_forward(tmp_path, kernels)
    announced = [r.getMessage() for r in caplog.records]
    name = kernels.__name__
    head, _, listed = announced[0].partition(": ")  # the kernels longest first (compile_workers.compile_cost)
    assert head == "compiling 3 kernels for this machine, once (numba caches them)"
    assert sorted(listed.split(", ")) == [f"{name}.scale x2", f"{name}.total"]
    assert sum(m.startswith(f"compiled {name}.scale in ") for m in announced) == 2
    caplog.clear()
    again = _import(tmp_path / "kernels.py", f"{kernels.__name__}_again")  # a new process's view: numba's disk cache
    with caplog.at_level(logging.INFO, logger="codegen"):
        link(FORWARD, again, {"forward": ARGUMENTS})
    assert not caplog.records
