"""Warm load of a compiled model in a fresh process: import + load from the AOT cache + first inference.

    python -m bench.warm_load [--model resnet18] [--repeat 5]

Compiles the model once (filling the cache), then times fresh Python processes:
the baseline only imports the package (what the interpreter needs too); the
warm run imports, loads the model from the cache and runs one inference. The
difference is what the cache costs a user; the target is under 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
IMPORT_ONLY = "import time; t = time.perf_counter(); import compiler; print(time.perf_counter() - t)"
WARM = """
import sys, time, json
t = time.perf_counter()
import numpy as np
import compiler
m = compiler.compile(sys.argv[1])
loaded = time.perf_counter() - t
m(np.zeros(m.inputs[0].shape, np.float32))
print(json.dumps({"total": time.perf_counter() - t, "load": loaded, "hit": m.cache_info.hit}))
"""


def _run(code: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from bench.pnnx_export import export_zoo

    param = str(export_zoo(args.model))
    cold = json.loads(_run(WARM, param))
    imports = [float(_run(IMPORT_ONLY)) for _ in range(args.repeat)]
    warm = [json.loads(_run(WARM, param)) for _ in range(args.repeat)]
    assert all(w["hit"] for w in warm), "the cache did not hit"
    base, total = float(np.median(imports)), float(np.median([w["total"] for w in warm]))
    print(f"{args.model}: first compile in a fresh process (cold unless cached before): {cold['total']:.2f} s")
    print(f"import compiler: {base:.3f} s (median of {args.repeat})")
    load = float(np.median([w["load"] for w in warm]))
    first = float(np.median([w["total"] - w["load"] for w in warm]))
    print(f"import + load from cache + first inference: {total:.3f} s "
          f"(import + load {load:.3f} s, first inference {first:.3f} s)")
    print(f"cost beyond the import: {total - base:.3f} s (target < 1 s)")


if __name__ == "__main__":
    main()
