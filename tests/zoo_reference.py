"""The zoo models every test file checks against torch, and their float64 references.

reference(name): an input, the torch model's float64 outputs on it and the rounding-error scale sigma
of each element (tests/numerics.py). It costs one or two float64 runs of the model (7 s for YOLOv5s
at batch 4), and four test files ask for the same models from different pytest workers, so each
reference is computed once per machine: saved beside the pnnx exports (bench/pnnx_export.py's zoo
cache, $PNNX_ZOO_CACHE), under a key of everything it depends on (the model's definition, the
numerics, torch's version, the batch), written under a lock into a directory renamed into place (a
concurrent reader never sees half of it), and loaded by the others.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np

from bench import zoo
from bench.pnnx_export import _zoo_key, build_cache_dir, default_cache_dir
from tests import numerics
from tests.numerics import check_float32, float64_with_error_scale

MODELS = ["tiny_cnn", "mlp", "transformer_block", "unet_small", "mobilenet_v2", "resnet18", "resnet50", "yolov5s"]
# the real architectures (not in tests/test_zoo.py's test_compiled_matches_torch_and_the_interpreter)
ARCHITECTURES = ["alexnet", "densenet121", "efficientnet_b0", "convnext_tiny"]
# the architectures also compiled at batch 2 (a second export each): ConvNeXt-T's permutes, layer norms and
# linears on channels-last, EfficientNet-B0's squeeze-and-excitation per image. AlexNet's flatten into its
# classifier and DenseNet-121's concats run at batch 2 in MODELS and PATTERNS (a batch-2 export of AlexNet alone
# took 15 s of CI's cold run)
ARCHITECTURES_AT_BATCH_2 = ["efficientnet_b0", "convnext_tiny"]
# reduced-size variants: every layer pattern of the real model, each runs in milliseconds
PATTERNS = ["vit_mini", "swin_mini", "mobilenet_v3_mini", "regnety_mini", "regnetx_mini", "inception_v3_mini",
            "shufflenet_v2_mini", "m5_audio_mini", "lstm_gru_mini", "llama_decoder_mini"]

SEED = 2  # make_input's


# MODELS that run at batch 2 rather than 4: at 4, YOLOv5s took 27 s of CI's cold run (its export, float64
# reference and both backends), ResNet-50 17 s
LARGE_MODELS = ["mobilenet_v2", "resnet50", "yolov5s"]


def reference_batch(name: str) -> int:
    """The largest batch the tests run `name` at: 4 for MODELS but LARGE_MODELS (tests/test_signatures.py
    runs ResNet-18 at 3), 2 for the others."""
    return 4 if name in MODELS and name not in LARGE_MODELS else 2


def _key(name: str, batch: int) -> str:
    """The export's key (the model's definition, torch's and pnnx's versions, the batch), as the ncnn
    conversions extend it too (bench/runtimes.py), and a digest of what only the reference depends on."""
    h = hashlib.sha256()
    for part in (str(SEED).encode(), Path(numerics.__file__).read_bytes(), np.__version__.encode()):
        h.update(part + b"\0")
    return f"{_zoo_key(name, batch)}-reference-{h.hexdigest()[:16]}"


def _compute(name: str, batch: int, out: Path) -> None:
    x = zoo.make_input(zoo.get(name), batch=batch, seed=SEED)
    exact, sigma = float64_with_error_scale(zoo.get(name).build(), x)
    arrays = {"x": x} | {f"exact{i}": e for i, e in enumerate(exact)} | {f"sigma{i}": s for i, s in enumerate(sigma)}
    np.savez(out / "reference.npz", **arrays)


@functools.cache
def reference(name: str) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """(x, exact outputs, sigma of each) at reference_batch(name). A batch-b test uses the first b
    images: make_input's first images do not depend on the batch size."""
    batch = reference_batch(name)
    final = default_cache_dir() / _key(name, batch)
    path = final / "reference.npz"
    if not path.is_file():
        build_cache_dir(final, [path], lambda tmp: _compute(name, batch, tmp))
    with np.load(path, allow_pickle=False) as saved:
        n = sum(1 for k in saved.files if k.startswith("exact"))
        return saved["x"], [saved[f"exact{i}"] for i in range(n)], [saved[f"sigma{i}"] for i in range(n)]


def check(got, name: str, batch: int, label: str) -> None:
    """`got` (an array or a tuple of them: the model's outputs on reference(name)'s first `batch`
    images) is the float64 reference to float32 accuracy (tests/numerics.py's check_float32)."""
    _, exact, sigma = reference(name)
    check_float32(list(got) if isinstance(got, tuple) else [got], [e[:batch] for e in exact],
                  [s[:batch] for s in sigma], label)
