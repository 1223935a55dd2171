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
