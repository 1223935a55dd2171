"""Every registered op is complete: a way in (a lowering rule, an expression function, or the pass
that makes it), a way out on the numba backend (an emit rule, or a scalar form the elementwise
loops and epilogues are generated from, or a place on the list of ops it interprets) and a reference implementation."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler.lowering.rules  # noqa: F401 - registers every lowering rule
from codegen.emit import emit_rule
from codegen.emit.elementwise import scalar_expression
from codegen.kernels.epilogue import ACTIVATION_CODES, activations_source
from ir.graph import Value, make_node
from ir.op_registry import Trait, all_ops, get_op
from ir.ops.expression import FUNCTIONS
from ir.ops.fused import apply_activation, as_epilogue, epilogue_activations
from ir.types import TensorType

ROOT = Path(__file__).resolve().parents[1]
OPS = sorted(all_ops())

# ops that reach codegen in another form: a pass rewrites them first
REWRITTEN = {"expression": "lower-expressions expands it into elementwise ops"}
# ops the numba backend runs by calling their numpy reference from the forward (codegen/interpreted.py):
# each one is a decision, taken for ops real models do not spend their time in
INTERPRETED: dict[str, str] = {
    "grid_sample": "a gather at data-dependent points: spatial transformers, rare and small",
    "cumsum": "a scan along one axis: position ids and masks, small",
    "cumprod": "a scan along one axis, rare",
    "topk": "a partial sort with torch's tie order: detection heads' last step, small",
    "flip": "a reversed copy, rare",
    "index_put": "writes at data-dependent positions, rare in inference",
    "gather": "a gather along one axis, small in the models we know",
    "scatter": "writes at data-dependent positions, rare in inference",
    "slice_scatter": "an in-place slice assignment, small",
    "unfold": "im2col as a model op, rare",
    "fold": "col2im as a model op, rare",
    "conv3d": "3-D convolution: video models (a kernel would lower it onto conv2d's)",
    "conv_transpose3d": "3-D transposed convolution: video and volume decoders",
    "max_pool3d_indices": "3-D max pool with indices (unpooling), rare",
    "adaptive_max_pool3d_indices": "3-D adaptive max pool with indices, rare",
}


def _string_constants(directory: Path) -> set[str]:
    """Every string literal in the Python sources of a directory, and the prefix+suffix joins of
    simple f-strings (f"{op}_indices" makes max_pool2d_indices from max_pool2d)."""
    found: set[str] = set()
    for path in directory.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


def _made_somewhere() -> set[str]:
    """IR op names a lowering rule or a pass can make."""
    strings = _string_constants(ROOT / "compiler" / "lowering") | _string_constants(ROOT / "compiler" / "passes")
    made = {s for s in strings if s in all_ops()}
    made |= set(FUNCTIONS.values())  # pnnx.Expression functions, expanded by lower-expressions
    made |= {op for op in all_ops() if op.endswith("_indices") and op.removesuffix("_indices") in made
             and "_indices" in strings}
    return made


MADE = _made_somewhere()


@pytest.mark.parametrize("op", OPS)
def test_every_op_has_a_lowering_path_a_numba_form_and_a_reference(op):
    opdef = get_op(op)
    assert op in MADE, f"no lowering rule or pass makes {op}"
    assert callable(opdef.compute) and inspect.signature(opdef.compute), f"{op} has no reference"
    has_kernel = emit_rule(op) is not None
    assert has_kernel or op in REWRITTEN or op in INTERPRETED, f"the numba backend has no kernel for {op}"
    assert not (has_kernel and op in INTERPRETED), f"{op} has a kernel now: take it off INTERPRETED"
    if opdef.has(Trait.ELEMENTWISE) and op not in REWRITTEN and op != "fused_elementwise":
        assert opdef.scalar is not None, f"elementwise op {op} has no scalar form"


@pytest.mark.parametrize("op", [op for op in OPS if get_op(op).scalar is not None])
def test_scalar_forms_are_python_expressions(op):
    opdef = get_op(op)
    attrs = {k: (a.choices[0] if a.choices else "float32" if k == "dtype" else a.default)
             for k, a in opdef.attrs.items()}
    attrs = {k: 0.5 if v is ... else v for k, v in attrs.items()}
    args = [f"x{i}" for i in range(opdef.arity()[0])]
    ast.parse(scalar_expression(op, args, attrs, "float32"), mode="eval")


def test_every_epilogue_activation_is_generated_into_the_epilogue_kernel():
    acts = epilogue_activations()
    assert set(ACTIVATION_CODES) == set(acts)
    assert (ACTIVATION_CODES["none"], ACTIVATION_CODES["relu"]) == (0, 1)  # epilogue_run's one-pass case
    source = activations_source()
    for name, code in ACTIVATION_CODES.items():
        assert f"code == {code}:  # {name}\n" in source
    assert {"gelu", "gelu_tanh", "clamp", "leaky_relu", "hardswish", "silu", "tanh"} <= set(acts)


def test_epilogue_activations_round_trip_through_the_fusion_pass_helpers():
    x = np.linspace(-4, 4, 17, dtype=np.float32)
    for op, attrs in [("clamp", {"min": -1.0, "max": 2.0}), ("leaky_relu", {"negative_slope": 0.2}),
                      ("gelu", {"approximate": "tanh"}), ("elu", {"alpha": 0.5}), ("hardswish", {})]:
        node = make_node(op, "n", [Value("x", TensorType((17,), "float32"))], ["y"], attrs)
        name, alpha, beta = as_epilogue(node)
        np.testing.assert_array_equal(apply_activation(x, name, alpha, beta), get_op(op).compute(x, **node.attrs))
    prelu = make_node("prelu", "p", [Value("x", TensorType((2, 3), "float32")),
                                     Value("w", TensorType((3,), "float32"))], ["y"])
    assert as_epilogue(prelu) is None  # two operands: not an epilogue activation


def test_the_generated_epilogue_source_is_part_of_the_kernel_cache_digest():
    """Conv and linear kernels inline activate_run: a new activation must drop their cached code."""
    import codegen.kernels as kernels

    stamp = kernels.HERE / "__pycache__" / kernels.STAMP
    if not stamp.exists():  # a read-only install keeps no stamp
        pytest.skip("no kernel cache stamp")
    assert stamp.read_text() == kernels.kernel_digest(extra=activations_source().encode())
    assert kernels.kernel_digest(extra=b"x") != kernels.kernel_digest(extra=b"y")


def test_the_generated_activations_file_is_named_by_the_kernel_sources_too():
    """activate_run inlines vmath's functions (erf, exp): its generated file, whose numba cache the
    kernels' stale-cache check never drops, is named by the kernel sources' digest as well as its
    own source, so an edit of vmath.py compiles it anew instead of loading stale machine code."""
    from pathlib import Path

    import codegen.kernels as kernels
    from codegen.kernels import epilogue

    source = Path(sys.modules[epilogue.activate_run.py_func.__module__].__file__).read_text()
    assert source.startswith(f"# kernel sources {kernels.kernel_digest()}\n")
    assert source.endswith(activations_source())
