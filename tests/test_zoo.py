"""Every zoo model, exported by pnnx: the IR round-trips, and both backends compute what the torch
model computes, to float32 accuracy: MODELS at batch 1 and 4 (the larger ones at 2, compiled), the
real ARCHITECTURES (AlexNet, DenseNet-121, EfficientNet-B0, ConvNeXt-T) at batch 1 (two of them at 2
too), and the reduced-size PATTERNS of today's architectures (ViT, Swin, MobileNetV3, RegNetY,
Inception-v3, ShuffleNetV2, a 1-D conv audio net, LSTM/GRU, a LLaMA-style decoder) at batch 1 and 2.

Accuracy is judged against the torch model evaluated in float64, element by element, within
K * sigma + u |y| + TINY, where sigma is the scale of a correct float32 evaluation's rounding
error at that element, derived from the computation (tests/numerics.py has the derivation). Not
against torch's float32 output: its rounding differs per CPU (AVX2, AVX-512), and a tolerance tied
to it passes on one machine and fails on another.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

import compiler
from bench.pnnx_export import export_zoo
from ir import parse_graph, print_graph, verify
from tests.zoo_reference import (
    ARCHITECTURES,
    ARCHITECTURES_AT_BATCH_2,
    LARGE_MODELS,
    MODELS,
    PATTERNS,
    check,
    reference,
    reference_batch,
)


@pytest.mark.parametrize("name", MODELS + ARCHITECTURES + PATTERNS)
def test_ir_round_trips(name):
    graph = compiler.load_graph(export_zoo(name))
    text = print_graph(graph)
    again = parse_graph(text, graph.weights())
    verify(again)
    assert print_graph(again) == text


@pytest.mark.parametrize("name", MODELS + ARCHITECTURES)
def test_interpreter_matches_torch(name):
    model = compiler.compile(export_zoo(name), backend="interpreter")
    check(model(reference(name)[0][:1]), name, 1, f"{name} interpreter")


@pytest.mark.parametrize("name, batch", [(name, batch) for name in MODELS for batch in (1, reference_batch(name))])
def test_compiled_matches_torch_and_the_interpreter(name, batch):
    x = reference(name)[0][:batch]
    param = export_zoo(name, batch=batch)
    check(compiler.compile(param)(x), name, batch, f"{name} numba batch {batch}")
    if batch > 1 and name not in LARGE_MODELS:  # batch 1: test_interpreter_matches_torch; PATTERNS' at batch 2
        check(compiler.compile(param, backend="interpreter")(x), name, batch, f"{name} interpreter batch {batch}")


def test_resnet_blocks_write_their_outputs_over_their_identity():
    """A residual conv's output takes its identity's buffer when nothing reads the identity later
    (codegen/memory_plan.py): in 7 or 8 of ResNet-18's 8 blocks (a 1x1 conv on 7 x 7 images with the
    channels in the vectors, on AVX-512, keeps its own), also in a model loaded from the cache; on
    AVX2 the first blocks' convs run on the channel-blocked layout (block-channels), and write over
    their blocked identity. The outputs are checked against torch in
    test_compiled_matches_torch_and_the_interpreter."""
    for _ in range(2):  # built, then loaded from the cache
        model = compiler.compile(export_zoo("resnet18"))
        assert len(model.memory_plan.overwritten) >= 7
        assert all(n.op in ("fused_conv2d", "blocked_conv2d") and i == 3
                   for n, i in model.memory_plan.overwritten.items())


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_compiled_architecture_matches_torch(name):
    """The real architectures compiled at batch 1 (their interpreter runs are checked above), and
    ARCHITECTURES_AT_BATCH_2 at batch 2 (a second export: pnnx bakes the batch into reshapes)."""
    x = reference(name)[0][:1]
    check(compiler.compile(export_zoo(name))(x), name, 1, f"{name} numba batch 1")
    if name in ARCHITECTURES_AT_BATCH_2:
        check(compiler.compile(export_zoo(name, batch=2))(reference(name)[0][:2]), name, 2, f"{name} numba batch 2")


@pytest.mark.parametrize("backend", ["interpreter", "numba"])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("name", PATTERNS)
def test_pattern_matches_torch(name, batch, backend):
    """The reduced architectures on both backends, at batch 1 and 2 (each batch is its own export:
    pnnx bakes the batch into reshapes, window counts and the like)."""
    x = reference(name)[0][:batch]
    check(compiler.compile(export_zoo(name, batch=batch), backend=backend)(x), name, batch,
          f"{name} {backend} batch {batch}")


def _with_one_weight_changed(param: Path, entry: str, index: int | None, relative: float, out_dir: Path) -> Path:
    """A copy of the exported model in which element `index` (None: the one of largest magnitude)
    of the weight `entry` (a name in the .pnnx.bin zip) is multiplied by 1 + relative."""
    shutil.copy(param, out_dir / param.name)
    with zipfile.ZipFile(param.with_suffix(".bin")) as src, \
            zipfile.ZipFile(out_dir / param.with_suffix(".bin").name, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == entry:
                w = np.frombuffer(data, np.float32).copy()
                i = int(np.argmax(np.abs(w))) if index is None else index
                w[i] *= np.float32(1 + relative)
                data = w.tobytes()
            dst.writestr(info.filename, data)
    return out_dir / param.name


@pytest.mark.parametrize("name, changes", [
    # the stem conv (BatchNorm folded in) and the classifier, each at its largest weight
    ("resnet18", [("convbn2d_0.weight", None), ("fc.weight", None)]),
    # the stem at its largest weight; the first anchor (116 px wide) of the stride-32 head, which
    # scales the badly conditioned box decode (2 sigmoid(t))^2 * anchor
    ("yolov5s", [("convbn2d_0.weight", None), ("detect.data", 0)]),
])
def test_check_rejects_a_weight_off_by_1e_3(name, changes, tmp_path):
    """The check is tight enough to see a small real bug: one weight off by a relative 1e-3 moves
    some output by more than K sigma (by 70 to 6000 sigma here), while the model as exported passes.
    Not any weight: a relative 1e-3 on a typical weight deep in the net moves the outputs less than
    float32 rounding does (torch's own float32 result is further from the exact one), and on a
    channel the activation has killed, not at all; no sound float32 check can see those."""
    param = export_zoo(name)
    x = reference(name)[0][:1]
    check(compiler.compile(param, backend="interpreter")(x), name, 1, f"{name} as exported")
    for i, (entry, index) in enumerate(changes):
        (tmp_path / str(i)).mkdir()
        changed = _with_one_weight_changed(param, entry, index, 1e-3, tmp_path / str(i))
        got = compiler.compile(changed, backend="interpreter")(x)
        with pytest.raises(AssertionError, match="beyond K"):
            check(got, name, 1, f"{name} with {entry} off by 1e-3")
