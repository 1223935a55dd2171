import pytest

from codegen.memory_plan import plan_memory
from ir import parse_graph

CHAIN = """
    graph g(%x: f32[1,64,56,56]) {
      %a: f32[1,64,56,56] = relu(%x) @r1
      %b: f32[1,64,56,56] = sigmoid(%a) @r2
      %c: f32[1,64,56,56] = tanh(%b) @r3
      %d: f32[1,200704] = reshape(%c) {shape=[1, 200704]} @flat
      %e: f32[1,200704] = neg(%d) @r4
      %out0: f32[1,200704] = abs(%e) @r5
      return %out0
    }"""
MB = 64 * 56 * 56 * 4


def test_chain_reuses_two_buffers_and_never_overlaps_a_kernels_inputs():
    graph = parse_graph(CHAIN)
    plan = plan_memory(graph, lambda n: n.op == "reshape")
    assert plan.arena_bytes == 2 * MB  # a, b, c (+ its view d), e ping-pong between two buffers
    assert plan.total_bytes == 4 * MB and plan.peak_live_bytes == 2 * MB
    by_name = {b.values[0].name: b for b in plan.buffers}
    assert [v.name for v in by_name["c"].values] == ["c", "d"]  # the view shares c's buffer and lifetime
    for node_step, node in enumerate(graph.nodes):
        outs = [b for b in plan.buffers if b.first == node_step]
        ins = [b for b in plan.buffers if any(v in b.values for v in node.inputs)]
        for o in outs:
            for i in ins:
                assert o.offset + o.nbytes <= i.offset or i.offset + i.nbytes <= o.offset, node.name


def test_outputs_are_not_in_the_arena():
    plan = plan_memory(parse_graph(CHAIN), lambda n: n.op == "reshape")
    assert {v.name for v in plan.owned} == {"out0"}
    assert all("out0" not in [v.name for v in b.values] for b in plan.buffers)


# -- concats written in place ------------------------------------------------------------------

DENSE = """
    graph g(%x: f32[1,2,3,3]) {
      %a: f32[1,2,3,3] = relu(%x) @stem
      %y1: f32[1,1,3,3] = slice(%a) {axes=[1], starts=[0], ends=[1], steps=[1]} @layer1
      %c1: f32[1,3,3,3] = concat(%a, %y1) {dim=1} @cat1
      %z1: f32[1,3,3,3] = sigmoid(%c1) @norm2
      %y2: f32[1,2,3,3] = slice(%z1) {axes=[1], starts=[1], ends=[3], steps=[1]} @layer2
      %c2: f32[1,5,3,3] = concat(%a, %y1, %y2) {dim=1} @cat2
      %out0: f32[1,5,3,3] = tanh(%c2) @head
      return %out0
    }"""
F = 4 * 9  # bytes of one channel


def _plan(text: str):
    from codegen.emit.data import concat_parts

    graph = parse_graph(text)
    return graph, plan_memory(graph, lambda n: n.op == "reshape", concat_parts)


def _by_name(graph, plan):
    values = {v.name: v for n in graph.nodes for v in n.outputs}
    nodes = {n.name: n for n in graph.nodes}
    return {name: plan.offsets.get(v) for name, v in values.items()}, {
        name: sorted(plan.in_place[n]) for name, n in nodes.items() if n in plan.in_place}


def _simulate(graph, plan):
    """Replay the plan on tagged bytes: every kernel writes its output's range with a fresh tag (a
    concat copies its inputs' tags, but for those in place); every read must find what its value
    held when written, and a concat's range must hold its inputs' contents in order."""
    import numpy as np

    tags = np.zeros(plan.arena_bytes, np.int64)
    held: dict = {}
    span = lambda v: slice(plan.offsets[v], plan.offsets[v] + v.type.nbytes)  # noqa: E731

    def read(v):
        if v in plan.offsets:
            assert np.array_equal(tags[span(v)], held[v]), f"{v.name} was overwritten"
            return held[v]
        return np.full(v.type.nbytes, -hash(v.name) % 1000 - 1000)  # an input or constant: not in the arena

    for step, node in enumerate(graph.nodes):
        contents = [read(v) for v in node.inputs]
        for k, v in enumerate(node.outputs):
            if v not in plan.offsets:
                held[v] = np.full(v.type.nbytes, -1)
                continue
            if node.op == "concat":
                start = plan.offsets[v]
                for i, (x, content) in enumerate(zip(node.inputs, contents)):
                    if i not in plan.in_place.get(node, ()):
                        tags[start:start + x.type.nbytes] = content
                    start += x.type.nbytes
                assert np.array_equal(tags[span(v)], np.concatenate(contents)), f"{node.name} joins the wrong bytes"
            elif node.op != "reshape":
                tags[span(v)] = 1 + 100 * step + k
            held[v] = tags[span(v)].copy()


def test_a_dense_block_writes_each_feature_once_into_the_widest_concat():
    graph, plan = _plan(DENSE)
    offsets, in_place = _by_name(graph, plan)
    c2 = offsets["c2"]
    assert (offsets["a"], offsets["y1"], offsets["y2"]) == (c2, c2 + 2 * F, c2 + 3 * F)  # cat2's parts
    assert offsets["c1"] == c2  # cat1 is a view of cat2's first three channels
    assert in_place == {"cat1": [0, 1], "cat2": [0, 1, 2]}
    assert "5 concat copies saved" in plan.summary()
    _simulate(graph, plan)


@pytest.mark.parametrize("text, expected", [
    # an input of the graph is copied; the produced input is written in place
    ("""graph g(%x: f32[1,2,4]) {
      %a: f32[1,2,4] = relu(%x) @r
      %c: f32[1,4,4] = concat(%x, %a) {dim=1} @cat
      %out0: f32[1,4,4] = neg(%c) @n
      return %out0
    }""", {"cat": [1]}),
    # the same value twice: written once, copied once
    ("""graph g(%x: f32[1,2,4]) {
      %a: f32[1,2,4] = relu(%x) @r
      %c: f32[1,4,4] = concat(%a, %a) {dim=1} @cat
      %out0: f32[1,4,4] = neg(%c) @n
      return %out0
    }""", {"cat": [0]}),
    # nested: the inner concat's output lies in the outer one, its inputs in it
    ("""graph g(%x: f32[1,2,4]) {
      %a: f32[1,2,4] = relu(%x) @r
      %b: f32[1,2,4] = neg(%x) @s
      %i: f32[1,4,4] = concat(%a, %b) {dim=1} @inner
      %d: f32[1,2,4] = abs(%x) @t
      %o: f32[1,6,4] = concat(%i, %d) {dim=1} @outer
      %out0: f32[1,6,4] = neg(%o) @n
      return %out0
    }""", {"inner": [0, 1], "outer": [0, 1]}),
    # through a reshape: the viewed value is written in place
    ("""graph g(%x: f32[1,8]) {
      %a: f32[1,8] = relu(%x) @r
      %v: f32[1,2,4] = reshape(%a) {shape=[1, 2, 4]} @view
      %b: f32[1,2,4] = neg(%v) @s
      %c: f32[1,4,4] = concat(%v, %b) {dim=1} @cat
      %out0: f32[1,4,4] = neg(%c) @n
      return %out0
    }""", {"cat": [0, 1]}),
    # batch 2: the parts are not contiguous, every input is copied
    ("""graph g(%x: f32[2,2,4]) {
      %a: f32[2,2,4] = relu(%x) @r
      %b: f32[2,2,4] = neg(%x) @s
      %c: f32[2,4,4] = concat(%a, %b) {dim=1} @cat
      %out0: f32[2,4,4] = neg(%c) @n
      return %out0
    }""", {}),
    # a graph output: neither written into a concat nor hosting one
    ("""graph g(%x: f32[1,2,4]) {
      %a: f32[1,2,4] = relu(%x) @r
      %b: f32[1,2,4] = neg(%x) @s
      %c: f32[1,4,4] = concat(%a, %b) {dim=1} @cat
      %out0: f32[1,4,4] = neg(%c) @n
      return %out0, %a
    }""", {"cat": [1]}),
    ("""graph g(%x: f32[1,2,4]) {
      %a: f32[1,2,4] = relu(%x) @r
      %b: f32[1,2,4] = neg(%x) @s
      %out0: f32[1,4,4] = concat(%a, %b) {dim=1} @cat
      return %out0
    }""", {}),
])
def test_concat_inputs_in_place_only_where_their_bytes_can_stay(text, expected):
    graph, plan = _plan(text)
    assert _by_name(graph, plan)[1] == expected
    _simulate(graph, plan)


# -- outputs written over a residual -----------------------------------------------------------

def _plan_over(text: str):
    """The plan with every add allowed to write its output over its input 1 (as a residual conv's
    kernel is: codegen/emit/conv.py, writes_over_residual), concats joined as the forward plans them."""
    from codegen.emit.data import concat_parts

    graph = parse_graph(text)
    plan = plan_memory(graph, lambda n: n.op == "reshape", concat_parts, lambda n: 1 if n.op == "add" else None)
    return graph, plan


RESIDUAL = """
    graph g(%x: f32[1,4,3,3]) {
      %a: f32[1,4,3,3] = relu(%x) @stem
      %b: f32[1,4,3,3] = sigmoid(%a) @branch
      %c: f32[1,4,3,3] = add(%b, %a) @join
      %d: f32[1,4,3,3] = tanh(%c) @next
      %out0: f32[1,4,3,3] = neg(%d) @head
      return %out0
    }"""


def test_an_output_takes_its_residuals_buffer_when_nothing_reads_the_residual_later():
    graph, plan = _plan_over(RESIDUAL)
    offsets, _ = _by_name(graph, plan)
    assert offsets["c"] == offsets["a"] != offsets["b"]
    assert [(n.name, i) for n, i in plan.overwritten.items()] == [("join", 1)]
    assert "1 outputs written over their residuals" in plan.summary()
    _simulate(graph, plan)
    # without the kernel's consent the output has a buffer of its own
    plain = plan_memory(graph, lambda n: n.op == "reshape")
    assert not plain.overwritten and _by_name(graph, plain)[0]["c"] != _by_name(graph, plain)[0]["a"]


@pytest.mark.parametrize("text, expected", [
    # the residual is read again later: only that later add may take it
    ("""graph g(%x: f32[1,4,3,3]) {
      %a: f32[1,4,3,3] = relu(%x) @stem
      %b: f32[1,4,3,3] = sigmoid(%a) @branch
      %c: f32[1,4,3,3] = add(%b, %a) @join
      %e: f32[1,4,3,3] = add(%c, %a) @late
      %out0: f32[1,4,3,3] = neg(%e) @head
      return %out0
    }""", ["late"]),
    # a graph input: not the arena's to overwrite
    ("""graph g(%x: f32[1,4,3,3]) {
      %b: f32[1,4,3,3] = sigmoid(%x) @branch
      %c: f32[1,4,3,3] = add(%b, %x) @join
      %out0: f32[1,4,3,3] = neg(%c) @head
      return %out0
    }""", []),
    # the residual is the node's other input too: its kernel still reads it elsewhere
    ("""graph g(%x: f32[1,4,3,3]) {
      %a: f32[1,4,3,3] = relu(%x) @stem
      %c: f32[1,4,3,3] = add(%a, %a) @join
      %out0: f32[1,4,3,3] = neg(%c) @head
      return %out0
    }""", []),
    # ... or through a view of it
    ("""graph g(%x: f32[1,36]) {
      %a: f32[1,36] = relu(%x) @stem
      %v: f32[1,36] = reshape(%a) {shape=[1, 36]} @view
      %c: f32[1,36] = add(%v, %a) @join
      %out0: f32[1,36] = neg(%c) @head
      return %out0
    }""", []),
    # a residual seen through a view of all its bytes, nothing reading either later: taken
    ("""graph g(%x: f32[1,36]) {
      %a: f32[1,36] = relu(%x) @stem
      %v: f32[1,4,3,3] = reshape(%a) {shape=[1, 4, 3, 3]} @view
      %b: f32[1,4,3,3] = sigmoid(%v) @branch
      %c: f32[1,4,3,3] = add(%b, %v) @join
      %out0: f32[1,4,3,3] = neg(%c) @head
      return %out0
    }""", ["join"]),
    # the view is read later: not taken
    ("""graph g(%x: f32[1,36]) {
      %a: f32[1,36] = relu(%x) @stem
      %v: f32[1,4,3,3] = reshape(%a) {shape=[1, 4, 3, 3]} @view
      %b: f32[1,4,3,3] = sigmoid(%v) @branch
      %c: f32[1,4,3,3] = add(%b, %a) @join
      %out0: f32[1,4,3,3] = mul(%c, %v) @head
      return %out0
    }""", []),
    # the output is a graph output (allocated on its own), or the residual is one
    ("""graph g(%x: f32[1,4,3,3]) {
      %a: f32[1,4,3,3] = relu(%x) @stem
      %b: f32[1,4,3,3] = sigmoid(%a) @branch
      %out0: f32[1,4,3,3] = add(%b, %a) @join
      return %out0
    }""", []),
    ("""graph g(%x: f32[1,4,3,3]) {
      %a: f32[1,4,3,3] = relu(%x) @stem
      %b: f32[1,4,3,3] = sigmoid(%a) @branch
      %c: f32[1,4,3,3] = add(%b, %a) @join
      %out0: f32[1,4,3,3] = neg(%c) @head
      return %out0, %a
    }""", []),
    # a residual that is part of a concat's buffer, smaller than it: not taken; the concat itself, read
    # last by the add: taken
    ("""graph g(%x: f32[1,2,4]) {
      %a: f32[1,2,4] = relu(%x) @r
      %b: f32[1,2,4] = neg(%x) @s
      %c: f32[1,4,4] = concat(%a, %b) {dim=1} @cat
      %d: f32[1,2,4] = add(%x, %a) @small
      %e: f32[1,4,4] = sigmoid(%c) @branch
      %f: f32[1,4,4] = add(%e, %c) @join
      %out0: f32[1,4,4] = mul(%f, %f) @head
      %out1: f32[1,2,4] = neg(%d) @head2
      return %out0, %out1
    }""", ["join"]),
])
def test_outputs_take_a_residuals_buffer_only_where_no_one_reads_it_again(text, expected):
    graph, plan = _plan_over(text)
    assert [n.name for n in plan.overwritten] == expected
    _simulate(graph, plan)
