"""Regenerate the demo model that ships inside the package (compiler/data/).

    python -m bench.make_shipped_model

It is the zoo's tiny_cnn (random weights, fixed seed), converted by pnnx.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.pnnx_export import export_zoo

DATA_DIR = Path(__file__).resolve().parents[1] / "compiler" / "data"


def main() -> None:
    param = export_zoo("tiny_cnn")
    for suffix in (".param", ".bin"):
        src = param.with_name(param.name.removesuffix(".param") + suffix)
        shutil.copyfile(src, DATA_DIR / f"tiny_cnn.pnnx{suffix}")
    print(f"wrote {DATA_DIR}/tiny_cnn.pnnx.param and .bin")


if __name__ == "__main__":
    main()
