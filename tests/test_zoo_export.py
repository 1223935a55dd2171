"""The model zoo runs in torch, and export_zoo converts and caches with pnnx."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from bench import zoo
from bench.pnnx_export import export_pnnx, export_zoo

EXPECTED_OUTPUT_SHAPES = {
    "resnet18": (1, 1000),
    "resnet50": (1, 1000),
    "mobilenet_v2": (1, 1000),
    "yolov5s": (1, 25200, 85),
    "yolov5s_320": (1, 6300, 85),
    "unet_small": (1, 2, 64, 64),
    "mlp": (1, 10),
    "transformer_block": (1, 16, 64),
    "tiny_cnn": (1, 10),
    "alexnet": (1, 1000),
    "densenet121": (1, 1000),
    "efficientnet_b0": (1, 1000),
    "convnext_tiny": (1, 1000),
    "vit_mini": (1, 10),
    "swin_mini": (1, 10),
    "mobilenet_v3_mini": (1, 10),
    "mobilenet_v3_large": (1, 1000),
    "regnety_400mf": (1, 1000),
    "regnety_800mf": (1, 1000),
    "regnetx_400mf": (1, 1000),
    "resnext50_32x4d": (1, 1000),
    "regnety_mini": (1, 10),
    "regnetx_mini": (1, 10),
    "inception_v3_mini": (1, 10),
    "shufflenet_v2_mini": (1, 10),
    "m5_audio_mini": (1, 10),
    "lstm_gru_mini": ((1, 5), (1, 12, 7)),  # two outputs: the last step's head, every step's
    "llama_decoder_mini": (1, 16, 50),
}


def test_registry_covers_expected_models():
    assert set(zoo.ZOO) == set(EXPECTED_OUTPUT_SHAPES)
    for name, entry in zoo.ZOO.items():
        assert entry.name == name and entry.input_shape[0] == 1 and entry.description
    with pytest.raises(KeyError, match="resnet18"):
        zoo.get("no_such_model")


@pytest.mark.parametrize("name", sorted(EXPECTED_OUTPUT_SHAPES))
def test_zoo_model_runs_in_torch(name):
    entry = zoo.get(name)
    model = entry.build()
    assert not model.training
    x = zoo.make_input(entry)
    assert x.dtype == np.float32 and x.shape == entry.input_shape
    with torch.no_grad():
        y = model(torch.from_numpy(x))
    outputs = y if isinstance(y, tuple) else (y,)
    expected = EXPECTED_OUTPUT_SHAPES[name]
    assert [tuple(o.shape) for o in outputs] == (list(expected) if isinstance(expected[0], tuple) else [expected])
    for o in outputs:
        assert torch.isfinite(o).all()
        assert o.std() > 0


def test_build_is_deterministic_and_bn_stats_nontrivial():
    entry = zoo.get("tiny_cnn")
    state = torch.get_rng_state()
    a, b = entry.build(), entry.build()
    assert torch.equal(state, torch.get_rng_state())  # global RNG untouched
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(va, vb)
    bns = [m for m in a.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns
    for bn in bns:
        assert bn.running_mean.abs().max() > 1e-3
        assert (bn.running_var - 1).abs().max() > 1e-2
        assert (bn.weight - 1).abs().max() > 1e-2


def test_make_input_batch_and_seed():
    entry = zoo.get("mlp")
    x = zoo.make_input(entry, batch=3, seed=5)
    assert x.shape == (3, 64) and x.dtype == np.float32
    assert np.array_equal(x, zoo.make_input(entry, batch=3, seed=5))
    assert not np.array_equal(x, zoo.make_input(entry, batch=3, seed=6))


@pytest.mark.parametrize("name", ["tiny_cnn", "mlp"])
def test_export_zoo_and_cache_hit(name, tmp_path):
    param = export_zoo(name, cache_dir=tmp_path)
    binf = param.with_name(f"{name}.pnnx.bin")
    assert param.name == f"{name}.pnnx.param"
    assert param.is_file() and binf.is_file()
    assert param.read_text().startswith("7767517")
    # only the two pnnx files are kept
    assert sorted(p.name for p in param.parent.iterdir()) == sorted([param.name, binf.name])

    mtimes = (param.stat().st_mtime_ns, binf.stat().st_mtime_ns)
    t0 = time.perf_counter()
    again = export_zoo(name, cache_dir=tmp_path)
    assert time.perf_counter() - t0 < 0.5
    assert again == param
    assert (param.stat().st_mtime_ns, binf.stat().st_mtime_ns) == mtimes

    # a different batch is a different cache entry
    if name == "mlp":
        other = export_zoo(name, batch=2, cache_dir=tmp_path)
        assert other.parent != param.parent
        assert "2,64" in other.read_text().replace(" ", "")


def test_tiny_cnn_ships_small(tmp_path):
    param = export_zoo("tiny_cnn", cache_dir=tmp_path)
    binf = param.with_name("tiny_cnn.pnnx.bin")
    assert param.stat().st_size + binf.stat().st_size < 100 * 1024


def test_export_pnnx_failure_raises_with_output(tmp_path):
    class Bad(torch.nn.Module):
        def forward(self, x):
            raise ValueError("boom in forward")

    with pytest.raises(RuntimeError, match="boom in forward"):
        export_pnnx(Bad(), np.zeros((1, 4), np.float32), tmp_path, "bad")
    assert list(tmp_path.iterdir()) == []
