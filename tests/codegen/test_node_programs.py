"""codegen/node_programs.py: each node's program computes what its numpy reference computes, on arrays
of its own (no arena); a reshape is a view; a node without a kernel runs its reference."""

from __future__ import annotations

import numpy as np
import pytest

from codegen.node_programs import build_node_programs
from compiler.interpreter import run_node
from ir import parse_graph

EPILOGUE = ('stride=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1, padding_mode="zeros", '
            'activation="relu", alpha=0.0, beta=0.0, post_activation="relu", post_alpha=0.0, post_beta=0.0')
GRAPH = f"""
    graph g(%x: f32[1,8,6,6]) {{
      const %w: f32[8,8,3,3]
      const %b: f32[8]
      %y: f32[1,8,6,6] = fused_conv2d(%x, %w, %b, %x) {{{EPILOGUE}}} @conv
      %f: f32[1,8,6,6] = flip(%y) {{dims=[3]}} @mirror
      %c: f32[1,16,6,6] = concat(%y, %f) {{dim=1}} @cat
      %r: f32[1,576] = reshape(%c) {{shape=[1, 576]}} @flat
      return %r
    }}"""


@pytest.fixture(scope="module")
def built():
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((8, 8, 3, 3)).astype(np.float32),
               "b": rng.standard_normal(8).astype(np.float32)}
    graph = parse_graph(GRAPH, weights)
    return graph, build_node_programs(graph, run_node)


def _run_all(graph, programs) -> dict[str, tuple[np.ndarray, list[np.ndarray]]]:
    """node name -> (its program's outputs, its reference's outputs on the same inputs)."""
    x = np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype(np.float32)
    env = {graph.inputs[0]: x}
    env.update((c, c.data) for c in graph.constants.values())
    results = {}
    for program in programs.programs:
        node = program.node
        got = program.run(*[env[v] for v in program.inputs])
        results[node.name] = (got, run_node(node, [env[v] for v in node.inputs]))
        env.update(zip(node.outputs, got))
    return results


def test_each_program_computes_its_reference(built):
    graph, programs = built
    for name, (got, expected) in _run_all(graph, programs).items():
        assert len(got) == len(expected) == 1, name
        assert got[0].shape == expected[0].shape and got[0].dtype == expected[0].dtype, name
        np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-5, err_msg=name)


def test_programs_take_the_non_constant_inputs_and_allocate_their_outputs(built):
    graph, programs = built
    conv = programs.programs[0]
    assert [v.name for v in conv.inputs] == ["x"]  # read twice (input and residual), taken once; w, b are globals
    assert "np.empty((1, 8, 6, 6), np.float32)" in programs.source  # its own output: no arena
    assert "conv_packed_conv2d_packed(" in programs.source  # the kernel the compiled forward calls
    assert programs.source.count("data_strided_copy(") == 2  # the concat copies each input (no in-place plan)


def test_reshape_is_a_view_and_a_node_without_a_kernel_runs_its_reference(built):
    graph, programs = built
    results = _run_all(graph, programs)
    cat, flat = results["cat"][0][0], results["flat"][0][0]
    assert np.shares_memory(cat, flat)
    assert programs.interpreted == {"mirror": "no numba kernel"}
    mirrored = results["mirror"][0][0]  # np.flip's view, made C-contiguous and writable for the kernels after it
    assert mirrored.flags.c_contiguous and mirrored.flags.writeable
    assert programs.programs[1].interpreted == "no numba kernel"
