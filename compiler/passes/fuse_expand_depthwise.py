"""fuse-expand-depthwise: a MobileNet block's 1x1 expansion and the depthwise conv reading it, on the
blocked layout, as one node whose kernel never stores the expansion whole.

    x -> blocked_conv2d (1x1, act_e) -> e -> blocked_conv2d (depthwise, act) -> y
        ==>   x -> blocked_expand_depthwise (act_e, act) -> y

The expansion (6 times the block's channels) is the largest tensor of an inverted residual block, written
once and read once. blocked.expand_depthwise_blocked computes each band of its rows a task's depthwise rows
read, one block of channels at a time, into the task's scratch, and runs the depthwise conv from there: in
kernels alone, 0.67-0.94 of the two kernels' time from 112 x 112 to 14 x 14 and level on 7 x 7 (AVX2, 2
threads, batch 1 and 8), the halo rows a band shares with the next computed twice.

Fused: an expansion that is a 1x1 conv (stride 1, no padding or groups) with no residual or post
activation, whose result only the depthwise conv reads (not a graph output).

Pre: block-channels has run. Post: no blocked depthwise conv reads such an expansion.
"""

from __future__ import annotations

from ir.graph import Graph, Node
from ir.ops.layout import is_depthwise_weight


def fuse_expand_depthwise(graph: Graph) -> Graph:
    graph = graph.copy()
    users = graph.users()
    outputs = set(graph.outputs)
    fused: dict[Node, Node] = {}  # depthwise conv -> its expansion
    for node in graph.nodes:
        if node.op != "blocked_conv2d" or not is_depthwise_weight(node.attrs["groups"], node.inputs[1].shape):
            continue
        e = node.inputs[0]
        if _is_expansion(e.producer) and e not in outputs and users.get(e, []) == [node]:
            fused[node] = e.producer
    expansions = set(fused.values())
    nodes = []
    for node in graph.nodes:
        if node in expansions:
            continue
        if node in fused:
            ex = fused[node]
            attrs = {**node.attrs, "expand_activation": ex.attrs["activation"], "expand_alpha": ex.attrs["alpha"],
                     "expand_beta": ex.attrs["beta"]}
            if ex.attrs.get("in_segments"):  # the expansion's input's (the depthwise conv's input has one)
                attrs["in_segments"] = ex.attrs["in_segments"]
            node = Node("blocked_expand_depthwise", f"{ex.name}+{node.name}", [*ex.inputs, *node.inputs[1:]],
                        node.outputs, attrs)
        nodes.append(node)
    graph.nodes = nodes
    return graph


def _is_expansion(node: Node | None) -> bool:
    """A blocked 1x1 conv the fused kernel computes: stride 1, no padding, groups or dilation, a bias, no
    residual or post activation."""
    if node is None or node.op != "blocked_conv2d" or len(node.inputs) != 3:
        return False
    a = node.attrs
    return (node.inputs[1].shape[2:] == (1, 1) and tuple(a["stride"]) == (1, 1) and not any(a["padding"])
            and a["groups"] == 1 and tuple(a["dilation"]) == (1, 1) and a["post_activation"] == "none")
