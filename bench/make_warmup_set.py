"""Regenerate the graphs `python -m compiler warmup` compiles the kernel library with (compiler/data/warmup/).

    python -m bench.make_warmup_set

Every zoo model's graph as lowered from pnnx (before the passes: warmup runs them on the CPU at hand, whose
vector width decides the layout and kernels they choose) at batch 1, and the small ones at batch 8 too (a
linear layer of one or two rows streams its weight, of more rows runs on packed panels: other kernels).
Only the IR text ships: its weights are zeros at warmup, since a kernel compiles for its argument types,
whatever their values (tests/test_warmup.py checks that the passes choose the same with zero weights).
"""

from __future__ import annotations

from pathlib import Path

import compiler
from bench.pnnx_export import export_zoo
from ir.printer import print_graph

WARMUP_DIR = Path(__file__).resolve().parents[1] / "compiler" / "data" / "warmup"
MODELS = ["tiny_cnn", "mlp", "transformer_block", "unet_small", "mobilenet_v2", "resnet18", "resnet50", "yolov5s",
          "alexnet", "densenet121", "efficientnet_b0", "convnext_tiny", "vit_mini", "swin_mini", "mobilenet_v3_mini",
          "regnety_mini", "regnety_800mf", "inception_v3_mini", "shufflenet_v2_mini", "m5_audio_mini", "lstm_gru_mini",
          "llama_decoder_mini"]
BATCH_8 = ["tiny_cnn", "mlp", "transformer_block", "resnet18", "mobilenet_v2", "vit_mini", "lstm_gru_mini"]


def warmup_ir(name: str, batch: int) -> str:
    """The text of compiler/data/warmup/{name}-b{batch}.ir: the zoo model's lowered IR (tests/test_warmup.py
    checks the shipped files against it). The passes are not run here: a set of optimised graphs held the
    layout of the machine that wrote it (16-lane blocks on AVX2, 64 on AVX-512) and the kernels the passes of
    its day chose, and first uses elsewhere, or after a pass changed, compiled the others."""
    return print_graph(compiler.load_graph(export_zoo(name, batch=batch)))


def main() -> None:
    WARMUP_DIR.mkdir(parents=True, exist_ok=True)
    for old in WARMUP_DIR.glob("*.ir"):
        old.unlink()
    for name, batch in [(n, 1) for n in MODELS] + [(n, 8) for n in BATCH_8]:
        path = WARMUP_DIR / f"{name}-b{batch}.ir"
        path.write_text(warmup_ir(name, batch))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
