"""python -m compiler warmup: after it, a fresh process compiles a model without compiling a kernel of
the library (numba loads them all from its cache)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import compiler
from bench.make_warmup_set import MODELS, warmup_ir
from bench.pnnx_export import export_zoo
from compiler.api import optimize
from compiler.warmup import warmup, warmup_graphs
from ir.parser import parse_graph
from ir.printer import print_graph

ROOT = Path(__file__).resolve().parents[1]

COMPILE = """
import sys, numpy as np, compiler
m = compiler.compile(sys.argv[1], cache=False)
m(np.zeros(m.inputs[0].shape, np.float32))
"""


def test_the_warmup_set_parses_and_covers_the_zoo():
    names = [name for name, _ in warmup_graphs()]
    assert "resnet18-b1" in names and "lstm_gru_mini-b8" in names and len(names) >= 28
    assert all(graph.nodes and graph.constants for _, graph in warmup_graphs())


@pytest.mark.parametrize("name", MODELS)
def test_the_warmup_set_is_the_zoo_as_lowered_today(name):
    """Each batch-1 graph of the set is the zoo model as lowered today, and the passes choose the same
    layout and kernels for it with the set's zero weights as with the real ones: warmup runs them on the
    CPU at hand. (A set of optimised graphs went stale once: it held another machine's 16-lane blocks and
    the passes of its day, and DenseNet's, UNet's and Inception's first uses compiled kernels it never had.)"""
    shipped = (ROOT / "compiler" / "data" / "warmup" / f"{name}-b1.ir").read_text()
    assert shipped == warmup_ir(name, 1), f"{name}: run `python -m bench.make_warmup_set`"
    real = compiler.load_graph(export_zoo(name))
    assert print_graph(optimize(parse_graph(shipped, zero_weights=True))) == print_graph(optimize(real))


def _saved_dirs(output: str, cache: Path) -> set[str]:
    """The directories of numba's cache (one per source directory) its debug output says it saved to."""
    prefix = f"data saved to '{cache}/"
    return {line.split(prefix, 1)[1].split("/", 1)[0] for line in output.splitlines() if prefix in line}


def test_after_warmup_a_fresh_process_compiles_no_library_kernel(tmp_path):
    """With numba's cache in an empty directory: warm up with the MLP's graphs (its linear kernels), then a
    fresh process compiles the zoo's MLP at batch 4: numba saves only the model's own forward, nothing
    in the directories of the kernel library and the generated loops, which it loads from the cache."""
    cache = tmp_path / "numba"
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_CACHE_DIR=str(cache), NUMBA_DEBUG_CACHE="1")
    script = "from compiler.warmup import warmup; print(warmup(names=['mlp-b1', 'mlp-b8']))"
    warmed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert warmed.returncode == 0, warmed.stderr
    library = {d for d in _saved_dirs(warmed.stdout, cache) if d.startswith("kernels_")}
    assert library  # the linear kernels were compiled, into the empty cache
    assert int(re.search(r"kernels=(\d+)", warmed.stdout)[1]) >= 2, warmed.stdout  # linear and linear_packed at least
    again = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr
    assert "kernels=0," in again.stdout and not _saved_dirs(again.stdout, cache), again.stdout  # all found cached
    done = subprocess.run([sys.executable, "-c", COMPILE, str(export_zoo("mlp", batch=4))], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert not _saved_dirs(done.stdout, cache) & library, done.stdout
    assert all(d.startswith("forward_") for d in _saved_dirs(done.stdout, cache) - library)


def test_warmup_reports_its_graphs():
    report = warmup(names=["tiny_cnn-b1"])
    assert report.graphs == 1 and report.seconds > 0
    assert compiler.compile(ROOT / "compiler" / "data" / "tiny_cnn.pnnx.param").inputs
