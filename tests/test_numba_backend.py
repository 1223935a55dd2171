"""compile(..., backend="numba"): the compiled model's call surface and the threads it uses."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import threadpoolctl

import codegen.runtime
import compiler
from compiler.numba_backend import NumbaModel
from tests.test_interpreter import two_inputs  # noqa: F401 - the fixture

SHIPPED = Path(compiler.__file__).parent / "data" / "tiny_cnn.pnnx.param"


def test_inputs_of_any_layout_run_without_a_second_compile(two_inputs, tmp_path):  # noqa: F811
    param, x, y, expected = two_inputs
    m = compiler.compile(param, cache_dir=tmp_path)
    read_only = x.copy()
    read_only.flags.writeable = False
    y_strided = np.repeat(y, 2, axis=3)[..., ::2]
    for args in [(x, y), (read_only, y), (np.asfortranarray(x), y_strided), (x.astype(np.float64), y)]:
        a, b = m(*args)
        np.testing.assert_allclose(a, expected[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(b, expected[1], rtol=1e-5, atol=1e-5)
    assert len(m._forward.signatures) == 1  # a read-only or unaligned input would otherwise recompile the forward


def test_numba_owns_the_threads_and_scipy_blas_runs_single_threaded():
    codegen.runtime.set_threads(2)
    import numba
    import scipy.linalg.cython_blas

    assert numba.get_num_threads() == min(2, numba.config.NUMBA_NUM_THREADS)
    scipy_dir = scipy.linalg.cython_blas.__file__.rsplit("/", 2)[0]
    libs = [lib for lib in threadpoolctl.threadpool_info()
            if lib["user_api"] == "blas" and lib["filepath"].startswith(scipy_dir)]
    assert libs and all(lib["num_threads"] == 1 for lib in libs)


def test_the_threads_option_holds_in_other_calling_threads(two_inputs, tmp_path):  # noqa: F811
    import threading

    import numba

    param, x, y, expected = two_inputs
    m = compiler.compile(param, cache_dir=tmp_path, threads=1)
    seen = []

    def call():
        a, _ = m(x, y)
        seen.append((numba.get_num_threads(), np.abs(a - expected[0]).max()))

    worker = threading.Thread(target=call)  # numba's thread count is per thread; the model sets its own
    worker.start()
    worker.join()
    assert seen[0][0] == 1 and seen[0][1] < 1e-5


def test_the_arena_is_kept_between_calls_and_outputs_never_live_in_it(tmp_path):
    """A call takes the model's arena and gives it back: the next call reuses it (no fresh pages),
    and what a call returned is not overwritten by the next one. The arena starts on a cache line,
    as the memory plan's offsets assume."""
    m = compiler.compile(SHIPPED, cache_dir=tmp_path)
    assert m.memory_plan.arena_bytes > 0
    rng = np.random.default_rng(0)
    shape = m.graph.inputs[0].shape
    x1, x2 = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
    reference = compiler.compile(SHIPPED, backend="interpreter")
    first = m(x1)
    arena = m.arenas._free[0]
    assert arena.ctypes.data % 64 == 0 and arena.nbytes == m.memory_plan.arena_bytes  # on a cache line
    second = m(x2)
    assert m.arenas._free == [arena]  # one arena, the same one, back in the pool
    np.testing.assert_allclose(first, reference(x1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second, reference(x2), rtol=1e-5, atol=1e-5)


def test_calls_from_several_threads_at_once_each_get_an_arena(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    m = compiler.compile(SHIPPED, cache_dir=tmp_path, threads=1)
    reference = compiler.compile(SHIPPED, backend="interpreter")
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(m.graph.inputs[0].shape).astype(np.float32) for _ in range(4)]
    expected = [reference(x) for x in inputs]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: [m(inputs[i % 4]) for _ in range(20)], range(4)))
    for i, outs in enumerate(results):
        for out in outs:
            np.testing.assert_allclose(out, expected[i], rtol=1e-5, atol=1e-5)
    assert 1 <= len(m.arenas._free) <= 4  # one per call that ran at once, all given back


def test_profile_times_every_node(two_inputs, tmp_path):  # noqa: F811
    param, x, y, _ = two_inputs
    m = compiler.compile(param, cache_dir=tmp_path, profile=True)
    rows = m.profile_kernels([x, y], repeat=2)
    assert [(name, op) for name, op, _ in rows] == [(n.name, n.op) for n in m.graph.nodes]
    assert all(np.isfinite(ms) and ms >= 0 for _, _, ms in rows)


def test_the_forward_binds_its_kernels_instead_of_linking_their_code(tmp_path):
    import llvmlite.binding as llvm

    from codegen.linker import KernelTable

    m = compiler.compile(SHIPPED, cache_dir=tmp_path)  # compiled here: its LLVM IR is at hand
    assert not m.cache_info.hit
    (signature,) = m._forward.signatures
    assert isinstance(signature[-1], KernelTable) and len(signature[-1].functions) >= 3  # conv, pool, linear
    assert "conv_packed_conv2d_packed = kernel(kernels, " in m.source
    module = llvm.parse_assembly(m._forward.overloads[signature].library.get_llvm_str())
    defined = {f.name for f in module.functions if not f.is_declaration}
    kernel_code = {r.fndesc.mangled_name for d in m._kernels.dispatchers for r in d.overloads.values()}
    assert kernel_code and not kernel_code & defined
    x = np.random.default_rng(0).normal(size=m.inputs[0].shape).astype(np.float32)
    reference = compiler.compile(SHIPPED, backend="interpreter")(x)
    np.testing.assert_allclose(m(x), reference, rtol=1e-4, atol=1e-5)


def test_constants_replaced_by_prepacked_weights_get_no_view_but_stay_in_the_graph(tmp_path):
    """A conv weight its rule prepacked (panels) is read by no line of the forward: no view of it there
    (each view costs compile time), but the cache entry keeps it, and the graph loaded from the entry
    has every constant with its bytes."""
    built = compiler.compile(SHIPPED, cache_dir=tmp_path)
    names = {c.name: c for c in built.graph.constants.values()}
    for name in ("convbn2d_0.weight", "convbn2d_3.weight"):
        assert names[name].shape[2:] == (3, 3)
        view_of = f"c_{name.replace('.', '_')}"
        assert not re.search(rf"\b{view_of} = view\(", built.source), name
        assert re.search(rf"\b{view_of}__\w+ = view\(", built.source), name  # its prepacked layout
    assert re.search(r"\bc_fc_weight = view\(", built.source)  # read as it is: kept
    loaded = compiler.compile(SHIPPED, cache_dir=tmp_path)
    assert loaded.cache_info.hit
    assert {c.name: c.shape for c in loaded.graph.constants.values()} == {n: c.shape for n, c in names.items()}
    for c in loaded.graph.constants.values():
        np.testing.assert_array_equal(c.data, names[c.name].data)
    x = np.random.default_rng(0).normal(size=loaded.inputs[0].shape).astype(np.float32)
    reference = compiler.compile(SHIPPED, backend="interpreter")(x)
    np.testing.assert_allclose(loaded(x), reference, rtol=1e-4, atol=1e-5)


def test_a_compile_pauses_the_cyclic_collector_and_restores_it(tmp_path):
    """compiler/gc_pause.py: the collector is off while the model compiles (each step sees it off) and
    back on afterwards; one that the caller had turned off stays off."""
    import gc

    seen = []
    assert gc.isenabled()
    compiler.compile(SHIPPED, cache_dir=tmp_path, on_step=lambda step: seen.append(gc.isenabled()))
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        compiler.compile(SHIPPED, cache=False, on_step=lambda step: seen.append(gc.isenabled()))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_compiles_restore_the_collector_when_the_last_ends():
    """Compiles in several threads overlap: the first to end must not turn the collector back on under
    the others."""
    import gc

    from compiler.gc_pause import collector_paused

    first, second = collector_paused(), collector_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # ends before the second
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


@pytest.mark.parametrize("text, node, reason", [
    ("""graph g(%a: f32[2,1,2,1,2,1,2,3,4], %b: f32[1,2,1,2,1,2,1,4,5]) {
  %m: f32[2,2,2,2,2,2,2,3,5] = matmul(%a, %b) @deep_matmul
  %out0: f32[2,2,2,2,2,2,2,3,5] = relu(%m) @r
  return %out0
}""", "deep_matmul", "matmul broadcast over 7 batch dims"),
    # its output is written in place into the concat's buffer, which a kernel then reads
    ("""graph g(%x: f32[2,3,4,5,6]) {
  %p: f32[4,3,4,5,6] = pad(%x) {pads=[0, 0, 0, 0, 0, 0, 0, 0, 1, 1]} @pad5
  %e: f32[4,3,4,5,6] = exp(%p) @e
  %c: f32[8,3,4,5,6] = concat(%p, %e) {dim=0} @cat
  %out0: f32[8,3,4,5,6] = tanh(%c) @t
  return %out0, %p
}""", "pad5", "padding of more than the 4 trailing dims"),
])
def test_a_node_without_a_kernel_runs_its_reference_inside_the_forward(text, node, reason, tmp_path, caplog):
    """The numba backend does not refuse a graph for one node it has no kernel for: the forward calls
    that node's numpy reference on the arrays the memory plan gave it, marks it in the IR and says so."""
    from compiler.interpreter import Interpreter
    from ir import parse_graph

    graph = parse_graph(text)
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=v.shape).astype(np.float32) for v in graph.inputs]
    with caplog.at_level("WARNING", logger="compiler.numba_backend"):
        m = NumbaModel.build(graph, tmp_path)
    assert list(m.interpreted) == [node] and reason in m.interpreted[node]
    assert f"@{node}  # interpreted: {reason}" in m.ir
    assert parse_graph(m.ir).nodes[0].name == graph.nodes[0].name  # the marks are comments
    assert re.search(rf"1 node\(s\) without a kernel run their numpy reference \(\w+\): {node}", caplog.text)
    got = m(*inputs)
    want = Interpreter(graph)(*inputs)
    for g, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def _kernel_table(module_dir: Path) -> list:
    """The kernel table (name and signature of each kernel call) of the one model NumbaModel.build
    wrote under module_dir (compiler/numba_backend.py, LINKAGE)."""
    import pickle

    from compiler.numba_backend import LINKAGE

    (path,) = module_dir.rglob(LINKAGE)
    return pickle.loads(path.read_bytes())


def test_ops_with_and_without_a_bias_share_their_kernels_signature(tmp_path):
    """A conv or linear without a bias passes zeros (Emit.bias), so that it calls the signature of
    its kernel that those with a bias call: None, a type of its own, compiled every conv kernel of a
    model with both again (tens of seconds each on 2 cores). Each kernel in the forward's table once;
    the outputs against the interpreter."""
    from compiler.interpreter import Interpreter
    from ir import parse_graph

    conv = 'stride=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1, padding_mode="zeros"'
    text = f"""graph g(%x: f32[2,8,9,9], %v: f32[40,24]) {{
      const %w1: f32[16,8,3,3]
      const %b1: f32[16]
      const %w2: f32[16,8,3,3]
      const %lw1: f32[32,24]
      const %lb1: f32[32]
      const %lw2: f32[32,24]
      %c1: f32[2,16,9,9] = conv2d(%x, %w1, %b1) {{{conv}}} @biased
      %c2: f32[2,16,9,9] = conv2d(%x, %w2) {{{conv}}} @unbiased
      %s: f32[2,16,9,9] = add(%c1, %c2) @sum
      %l1: f32[40,32] = linear(%v, %lw1, %lb1) @fc_biased
      %l2: f32[40,32] = linear(%v, %lw2) @fc_unbiased
      %t: f32[40,32] = mul(%l1, %l2) @product
      return %s, %t
    }}"""
    rng = np.random.default_rng(5)
    shapes = {"w1": (16, 8, 3, 3), "b1": (16,), "w2": (16, 8, 3, 3), "lw1": (32, 24), "lb1": (32,), "lw2": (32, 24)}
    weights = {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}
    m = NumbaModel.build(parse_graph(text, weights), tmp_path)
    calls = [line for line in m.source.splitlines() if line.rstrip().endswith(("# biased", "# unbiased"))]
    assert len(calls) == 2 and calls[0].split("(")[0].split()[-1] == calls[1].split("(")[0].split()[-1], calls
    table = _kernel_table(tmp_path)
    names = [ref.name for ref in table]
    assert len(names) == len(set(names)), names  # one signature a kernel
    x, v = rng.standard_normal((2, 8, 9, 9)).astype(np.float32), rng.standard_normal((40, 24)).astype(np.float32)
    for got, want in zip(m(x, v), Interpreter(parse_graph(text, weights))(x, v)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_kernels_get_computed_weights_read_only_as_they_get_constants(tmp_path):
    """A weight, bias or norm parameter the graph computes reaches its kernel read-only (Emit.weight:
    frozen()), typed as a constant one is, so that the kernel compiles one signature for both: a conv
    on a computed weight compiled conv2d's whole tree again. Outputs against the interpreter."""
    from compiler.interpreter import Interpreter
    from ir import parse_graph

    conv = 'stride=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1], groups=1, padding_mode="zeros"'
    text = f"""graph g(%x: f32[2,4,9,9], %k: f32[6,4,3,3], %kb: f32[6], %v: f32[5,8], %lw: f32[3,8], %g: f32[8]) {{
      %w: f32[6,4,3,3] = relu(%k) @weight
      %b: f32[6] = neg(%kb) @bias
      %c: f32[2,6,9,9] = conv2d(%x, %w, %b) {{{conv}}} @conv
      %lwr: f32[3,8] = tanh(%lw) @linear_weight
      %l: f32[5,3] = linear(%v, %lwr) @fc
      %gr: f32[8] = abs(%g) @norm_weight
      %n: f32[5,8] = layer_norm(%v, %gr, %g) {{normalized_shape=[8], eps=1e-05}} @norm
      return %c, %l, %n
    }}"""
    graph = parse_graph(text)
    m = NumbaModel.build(graph, tmp_path)
    table = _kernel_table(tmp_path)
    called = {ref.name: ref.signature.args for ref in table}
    parameters = {"conv2d": (1, 2), "linear": (1,), "layer_norm": (1, 2)}
    for kernel, indices in parameters.items():
        (args,) = [a for name, a in called.items() if name.endswith("_" + kernel)]
        assert all(not args[i].mutable for i in indices), (kernel, args)
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(v.shape).astype(np.float32) for v in graph.inputs]
    for got, want in zip(m(*inputs), Interpreter(parse_graph(text))(*inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_concats_written_in_place_give_the_interpreters_result(tmp_path):
    """A DenseNet-like chain of concats (features written once into the widest one; the narrower
    concats are views of it) and a nested concat, against the interpreter."""
    from compiler.interpreter import Interpreter
    from ir import parse_graph
    from tests.codegen.test_memory_plan import DENSE

    nested = """graph g(%x: f32[1,2,5]) {
      %a: f32[1,2,5] = relu(%x) @r
      %b: f32[1,2,5] = neg(%x) @s
      %i: f32[1,4,5] = concat(%a, %b) {dim=1} @inner
      %d: f32[1,2,5] = abs(%x) @t
      %o: f32[1,8,5] = concat(%i, %d, %x) {dim=1} @outer
      %out0: f32[1,8,5] = tanh(%o) @n
      return %out0, %i
    }"""
    rng = np.random.default_rng(0)
    for text in (DENSE, nested):
        graph = parse_graph(text)
        m = NumbaModel.build(graph, tmp_path)
        assert m.memory_plan.in_place  # the point of the test: some copies were saved
        x = rng.standard_normal(graph.inputs[0].shape).astype(np.float32)
        got, want = m(x), Interpreter(parse_graph(text))(x)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)  # fast tanh: ulps


def test_concats_at_batch_above_one_copy_every_input_in_one_call(tmp_path):
    """At batch > 1 a concat's inputs are not end to end in its output: those in the arena are
    copied by one copy_runs call per concat (float32 and int64 here, parallel tasks for the big one);
    a graph input among them falls back to a copy per input. Against the interpreter."""
    from compiler.interpreter import Interpreter
    from ir import parse_graph

    text = """graph g(%x: f32[3,2,5], %big: f32[2,64,600], %k: i64[3,2,5]) {
      %a: f32[3,2,5] = relu(%x) @r
      %b: f32[3,6,5] = concat(%a, %x, %a) {dim=1} @mixed
      %c: f32[3,2,5] = neg(%x) @s
      %d: f32[3,10,5] = concat(%a, %c, %b) {dim=1} @arena
      %e: f32[3,10,5] = tanh(%d) @t
      %p: f32[2,64,600] = neg(%big) @u
      %q: f32[2,64,600] = relu(%big) @v
      %w: f32[2,128,600] = concat(%p, %q) {dim=1} @wide
      %out1: f32[2,128,600] = abs(%w) @abs
      %j: i64[3,2,5] = neg(%k) @ineg
      %l: i64[3,4,5] = concat(%j, %j) {dim=1} @ints
      %out2: i64[3,4,5] = neg(%l) @ineg2
      return %e, %out1, %out2
    }"""
    graph = parse_graph(text)
    m = NumbaModel.build(graph, tmp_path)
    calls = {line.split("  # ")[-1]: line for line in m.source.splitlines() if "  # " in line}
    assert all("copy_runs" in calls[n] for n in ("arena", "wide", "ints")) and "copy_runs" not in calls["mixed"]
    rng = np.random.default_rng(0)
    x, big = (rng.standard_normal(v.shape).astype(np.float32) for v in graph.inputs[:2])
    k = rng.integers(-50, 50, graph.inputs[2].shape)
    for got, want in zip(m(x, big, k), Interpreter(parse_graph(text))(x, big, k)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _njit_options(m: NumbaModel) -> str:
    """The options of the model's forward's @numba.njit."""
    return re.search(r"@numba\.njit\((.*)\)\ndef forward\(", m.source).group(1)


def test_a_forward_that_allocates_nothing_compiles_without_reference_counting(tmp_path):
    """Its arrays are all views of the caller's (inputs, weights, outputs, arena, a node's scratch after
    the plan's buffers), so numba leaves out the reference counting, a fifth to a quarter of the forward's
    compile time. A reduction over a middle dim gathers its input into scratch first (emit/reduce.py):
    that scratch lives in the arena, past every buffer of the plan, and two calls give the interpreter's
    result into fresh outputs."""
    from compiler.interpreter import Interpreter
    from ir import parse_graph

    graph = parse_graph("""graph g(%x: f32[2,3,4,5]) {
  %e: f32[2,3,4,5] = exp(%x) @e
  %s: f32[2,4] = reduce_sum(%e) {dims=[1, 3]} @s
  %out0: f32[2,4] = tanh(%s) @t
  return %out0, %e
}""")
    m = NumbaModel.build(graph, tmp_path)
    assert "_nrt=False" in _njit_options(m)
    assert re.search(r"_gathered = view\(arena, \d+, np\.float32, \(120,\)\)", m.source)
    plan_only = m.memory_plan.buffers and max(b.offset + b.nbytes for b in m.memory_plan.buffers)
    assert m.memory_plan.arena_bytes >= plan_only + 120 * 4
    rng = np.random.default_rng(0)
    x1, x2 = (rng.normal(size=(2, 3, 4, 5)).astype(np.float32) for _ in range(2))
    first, second = m(x1), m(x2)
    for got, x in ((first, x1), (second, x2)):
        for g, w in zip(got, Interpreter(graph)(x)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert not np.shares_memory(first[0], second[0]) and not np.shares_memory(first[1], second[1])


@pytest.mark.parametrize("returns", ["%x", "%v", "%t, %t"])
def test_outputs_that_are_inputs_views_or_repeated_are_copied_into_fresh_arrays(returns, tmp_path):
    """The forward fills arrays the caller passes. An output the graph does not compute into a buffer of
    its own (an input, a view of another value, a value returned twice) is copied into its array at the
    end, never aliased to the caller's input or the arena: one memcpy each (codegen/array_view.py, copied)."""
    from ir import parse_graph

    graph = parse_graph(f"""graph g(%x: f32[2,6]) {{
  %t: f32[2,6] = tanh(%x) @t
  %v: f32[3,4] = reshape(%t) {{shape=[3, 4]}} @v
  %out0: f32[2,6] = exp(%t) @e
  return %out0, {returns}
}}""")
    m = NumbaModel.build(graph, tmp_path)
    assert "copied(out_" in m.source and "[...]" not in m.source
    x = np.random.default_rng(1).normal(size=(2, 6)).astype(np.float32)
    got = m(x)
    t = np.tanh(x)
    want = {"%x": [x], "%v": [t.reshape(3, 4)], "%t, %t": [t, t]}[returns]
    np.testing.assert_allclose(got[0], np.exp(t), rtol=1e-5)
    for g, w in zip(got[1:], want):
        np.testing.assert_allclose(g, w, rtol=1e-5)
        assert not np.shares_memory(g, x) and not any(np.shares_memory(g, a) for a in m.arenas._free)
    if returns == "%t, %t":
        assert not np.shares_memory(got[1], got[2])


def test_a_forward_the_emitter_misjudged_compiles_with_reference_counting(tmp_path, monkeypatch, caplog):
    """Should a line allocate where the emitter's rule (_ALLOCATES) saw none, as converting int32 indices
    to int64 for the take kernel does, numba refuses the forward without reference counting, and it
    compiles again with it, saying so, instead of failing."""
    import codegen.emitter
    from ir import parse_graph

    monkeypatch.setattr(codegen.emitter, "_ALLOCATES", re.compile(r"(?!)"))  # sees no allocation anywhere
    graph = parse_graph("""graph g(%x: f32[5,3], %i: i32[4]) {
  %out0: f32[4,3] = index(%x, %i) {axes=[0]} @take
  return %out0
}""")
    with caplog.at_level("WARNING", logger="compiler.numba_backend"):
        m = NumbaModel.build(graph, tmp_path)
    assert "_nrt=False" in _njit_options(m) and ".astype(np.int64)" in m.source
    assert "forward allocates, though the emitter judged it did not" in caplog.text
    x, i = np.arange(15, dtype=np.float32).reshape(5, 3), np.array([4, 0, 2, 2], np.int32)
    np.testing.assert_array_equal(m(x, i), x[i])


@pytest.mark.parametrize("cache", [True, False])
def test_the_weights_start_on_a_cache_line_with_the_cache_or_without(cache, tmp_path):
    """Every weight pack the forward reads starts on a cache line, whether it was memory-mapped from a
    cache entry or packed in memory (cache=False, profile=True): each constant's offset in its pack is a
    multiple of 64 bytes, so the kernels' vector loads of a weight never split across two lines."""
    m = compiler.compile(SHIPPED, cache=cache, cache_dir=tmp_path)
    assert m._weights and [w.ctypes.data % 64 for w in m._weights] == [0] * len(m._weights)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int64", "uint8"])
def test_aligned_empty_starts_on_a_cache_line_for_any_size_and_dtype(dtype):
    """numpy aligns its data to 16 bytes only; aligned_empty's start is a multiple of 64 bytes whatever the
    allocator hands out (many sizes, so small and large allocations both come up), with the size asked."""
    from codegen.memory_plan import aligned_empty

    arrays = [aligned_empty(size, dtype) for size in [1, 3, 16, 17, 1000, 65_537, 1 << 20] * 4]
    assert [a.ctypes.data % 64 for a in arrays] == [0] * len(arrays)
    assert [a.size for a in arrays] == [1, 3, 16, 17, 1000, 65_537, 1 << 20] * 4
    assert {a.dtype for a in arrays} == {np.dtype(dtype)}


def test_a_weight_pack_places_each_constant_on_a_cache_line_for_every_dtype():
    """WeightPack.arrays (the packs of a model built without the cache) start on a cache line, and every
    constant's offset in its pack is a multiple of 64 bytes for 1-, 2-, 4- and 8-byte dtypes, with its
    values in place and zeros between."""
    from codegen.emitter import WeightPack

    class Constant:  # what WeightPack reads of a Value
        def __init__(self, data):
            self.data, self.dtype = data, data.dtype.name

    rng = np.random.default_rng(0)
    constants = [Constant((rng.standard_normal(n) * 10).astype(dtype))
                 for n in [1, 5, 16, 33, 100] for dtype in ["float32", "float16", "int8", "int64", "float64"]]
    pack = WeightPack.build(constants)
    for c in constants:
        dtype, start = pack.slots[c]
        packed = pack.arrays[dtype]
        assert packed.ctypes.data % 64 == 0 and (start * packed.itemsize) % 64 == 0, (dtype, start)
        np.testing.assert_array_equal(packed[start:start + c.data.size], c.data)
    for dtype, packed in pack.arrays.items():
        used = sum(c.data.size for c in constants if c.dtype == dtype)
        assert np.count_nonzero(packed) <= used and packed.size >= used
