"""The optimisation pipeline: a flat list of named passes, read top to bottom.

Each pass is a pure Graph -> Graph function in a file of its own name.
"""

from __future__ import annotations

from collections.abc import Sequence

from compiler.passes.block_channels import block_channels
from compiler.passes.cut_at_feeds import cut_at_feeds
from compiler.passes.eliminate_dead_code import eliminate_dead_code
from compiler.passes.fold_batchnorm import fold_batchnorm
from compiler.passes.fold_constants import fold_constants
from compiler.passes.fuse_conv_epilogue import fuse_conv_epilogue
from compiler.passes.fuse_conv_prologue import fuse_conv_prologue
from compiler.passes.fuse_elementwise import fuse_elementwise
from compiler.passes.fuse_expand_depthwise import fuse_expand_depthwise
from compiler.passes.hoist_activations import hoist_activations
from compiler.passes.lower_expressions import lower_expressions
from compiler.passes.manager import Pass, PassManager
from compiler.passes.prune_outputs import prune_outputs
from compiler.passes.schedule import schedule

__all__ = ["Pass", "PassManager", "pipeline"]


def pipeline(outputs: Sequence[str] | None = None, fuse: bool = True, feeds: Sequence[str] | None = None) -> list[Pass]:
    """The passes compile() runs, in order. outputs: prune to these values; fuse: run the fusion passes;
    feeds: start from these values (graph inputs or intermediates), dropping the inputs nothing needs."""
    passes = [Pass("prune-outputs", prune_outputs(outputs).run)] if outputs is not None else []
    if feeds is not None:
        passes.append(cut_at_feeds(feeds))
    passes += [
        Pass("lower-expressions", lower_expressions),
        Pass("fold-constants", fold_constants),
        Pass("fold-batchnorm", fold_batchnorm),
        Pass("eliminate-dead-code", eliminate_dead_code),
    ]
    if fuse:
        passes += [
            Pass("hoist-activations", hoist_activations),
            Pass("fuse-conv-epilogue", fuse_conv_epilogue),
            Pass("fuse-elementwise", fuse_elementwise),
            Pass("fuse-conv-prologue", fuse_conv_prologue),
            Pass("block-channels", block_channels),
            Pass("fuse-expand-depthwise", fuse_expand_depthwise),
        ]
    passes.append(Pass("schedule", schedule))
    return passes
