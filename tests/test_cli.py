"""The command line, driven in subprocesses: outputs and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "compiler" / "data" / "tiny_cnn.pnnx.param"


def cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PNNX_JIT_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, "-m", "compiler", *args], env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli_cache")


def test_run_without_a_model_runs_the_shipped_one(cache):
    result = cli("run", cache=cache)
    assert result.returncode == 0, result.stderr
    assert "tiny_cnn.pnnx.param (backend numba)" in result.stdout
    assert "output out0: shape (1, 10) float32 first values [" in result.stdout


def test_run_with_input_file_saves_outputs_matching_the_interpreter(cache, tmp_path):
    x = np.random.default_rng(0).normal(size=(1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    for backend in ("numba", "interpreter"):
        out_dir = tmp_path / backend
        result = cli("run", str(SHIPPED), "--input", str(tmp_path / "x.npy"), "--output-dir", str(out_dir),
                     "--backend", backend, cache=cache)
        assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.load(tmp_path / "numba" / "out0.npy"), np.load(tmp_path / "interpreter" / "out0.npy"),
                               rtol=1e-5, atol=1e-5)


def test_bad_paths_and_inputs_exit_with_2_and_a_message(cache, tmp_path):
    missing = cli("run", str(tmp_path / "absent.pnnx.param"), cache=cache)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    (tmp_path / "bad.npy").write_text("not numpy")
    bad = cli("run", str(SHIPPED), "--input", str(tmp_path / "bad.npy"), cache=cache)
    assert bad.returncode == 2 and "cannot read input file" in bad.stderr
    np.save(tmp_path / "wrong.npy", np.zeros((3, 32, 32), np.float32))
    wrong = cli("run", str(SHIPPED), "--input", str(tmp_path / "wrong.npy"), cache=cache)
    assert wrong.returncode == 2 and "input in0: expected shape (1, 3, 32, 32)" in wrong.stderr
    np.save(tmp_path / "channels.npy", np.zeros((1, 4, 32, 32), np.float32))  # the right rank: a specialization
    channels = cli("run", str(SHIPPED), "--input", str(tmp_path / "channels.npy"), cache=cache)
    assert channels.returncode == 2, channels.stdout
    assert "in0 (1, 4, 32, 32): the model cannot take these shapes" in channels.stderr
    assert "nn.Conv2d convbn2d_0: cannot lower to conv2d: input channels 4 do not match" in channels.stderr


def test_unsupported_operator_exits_with_2_listing_it(cache, tmp_path):
    param = tmp_path / "u.pnnx.param"
    param.write_text("7767517\n3 2\npnnx.Input in 0 1 0 #0=(2)f32\nfoo.Bar b 1 1 0 1\npnnx.Output out 1 0 1\n")
    result = cli("compile", str(param), cache=cache)
    assert result.returncode == 2 and "foo.Bar: b" in result.stderr


def test_compile_then_cache_list_info_clear(cache, tmp_path):
    own = tmp_path / "own_cache"
    first = cli("compile", str(SHIPPED), cache=own)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("compiled in") and str(own) in first.stdout
    second = cli("compile", str(SHIPPED), cache=own)
    assert second.stdout.startswith("loaded from cache")
    listed = cli("cache", "list", cache=own)
    header, *rows = listed.stdout.strip().splitlines()
    assert "last used" in header and len(rows) == 1 and "tiny_cnn" in rows[0]
    assert "entries: 1" in cli("cache", "info", cache=own).stdout
    assert "removed 1 entries" in cli("cache", "clear", cache=own).stdout
    assert "no entries" in cli("cache", "list", cache=own).stdout


def test_bench_prints_percentiles_and_the_interpreter_ratio(cache):
    result = cli("bench", str(SHIPPED), "--iterations", "10", cache=cache)
    assert result.returncode == 0, result.stderr
    assert "median ms" in result.stdout and "p99 ms" in result.stdout and "items/s" in result.stdout
    assert "faster than the interpreter" in result.stdout


@pytest.mark.parametrize("backend", ["numba", "executor", "interpreter"])
def test_profile_prints_nodes_and_writes_a_chrome_trace(cache, tmp_path, backend):
    """The same table and trace for every backend: one row per node (per kernel for numba), real timestamps."""
    trace = tmp_path / "trace.json"
    result = cli("profile", str(SHIPPED), "--backend", backend, "--trace", str(trace), cache=cache)
    assert result.returncode == 0, result.stderr
    assert f"backend {backend}" in result.stdout and "nodes (sum)" in result.stdout
    convs = "fused_conv2d" if backend != "interpreter" else "conv2d"
    assert convs in result.stdout and "convbn2d_3" in result.stdout
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    nodes = compiler.compile(SHIPPED, backend=backend, cache_dir=cache).graph.nodes
    assert sorted(e["name"] for e in events) == sorted(n.name for n in nodes)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    if backend != "executor":  # one thread, one node after another (the executor may overlap them)
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events)
        assert all(start >= end - 1e-3 for (_, end), (start, _) in zip(spans, spans[1:]))


def test_show_marks_the_nodes_the_numba_backend_interprets(cache, tmp_path):
    from tests.test_interpreter import write_model

    param = write_model(tmp_path, [
        "pnnx.Input in 0 1 0 #0=(2,5)f32",
        "torch.cumsum c 1 1 0 1 dim=1 $input=0 #0=(2,5)f32 #1=(2,5)f32",
        "nn.ReLU r 1 1 1 2 #1=(2,5)f32 #2=(2,5)f32",
        "pnnx.Output out 1 0 2",
    ])
    shown = cli("show", str(param), cache=cache)
    assert shown.returncode == 0, shown.stderr
    marked = [line for line in shown.stdout.splitlines() if "# interpreted" in line]
    assert len(marked) == 1 and "cumsum(" in marked[0]


def test_show_prints_ir_after_a_pass_and_writes_dot(cache, tmp_path):
    lowered = cli("show", str(SHIPPED), cache=cache)
    assert lowered.returncode == 0 and "conv2d(" in lowered.stdout and "fused_conv2d" not in lowered.stdout
    fused = cli("show", str(SHIPPED), "--after", "fuse-conv-epilogue", cache=cache)
    assert "fused_conv2d(" in fused.stdout
    bad = cli("show", str(SHIPPED), "--after", "no-such-pass", cache=cache)
    assert bad.returncode == 2 and "no pass named 'no-such-pass'" in bad.stderr
    dot = tmp_path / "g.dot"
    assert cli("show", str(SHIPPED), "--dot", str(dot), cache=cache).returncode == 0
    assert dot.read_text().startswith('digraph "tiny_cnn"')
