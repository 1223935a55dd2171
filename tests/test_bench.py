"""The zoo benchmark's harness: its tables, chart and JSON on made-up results, and one small real run;
FLOP counting, the ncnn runtime and the peak measurement it reports against.

No timing assertions: speed targets live in the benchmark's output, never in tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch

from bench import zoo
from bench.pnnx_export import export_zoo
from bench.runtimes import (
    graph_flops,
    isa,
    measure_peak_gflops,
    model_flops,
    ncnn_net,
    ncnn_runtime,
    ncnn_unavailable,
)
from bench.zoo_report import (
    MEMORY_RUNTIMES,
    RUNTIMES,
    ModelResult,
    Report,
    load,
    machine_line,
    render_markdown,
    write_all,
)
from ir.graph import Graph, Value, make_node
from ir.types import TensorType

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MACHINE = {"cpu": "Test CPU", "cpus": "2", "isa": "AVX2", "threads": "2", "python": "3.11", "numpy": "2",
           "numba": "0.6", "torch": "2.13", "onnxruntime": "1.3", "ncnn": "1.0.1", "commit": "abc1234",
           "date": "2026-01-01 00:00 UTC", "peak": "float32 2048x2048 GEMM through numpy's BLAS, best of 5, 2 threads"}
NCNN_SKIP = ncnn_unavailable()


def fake_report() -> Report:
    full = ModelResult(
        "resnet18", 1, flops=3_600_000_000,
        latency_ms={"compiled": 20.0, "interpreter": 400.0, "torch": 15.0, "onnxruntime": 10.0, "ncnn": 12.0},
        compile_cold_s=9.5, compile_warm_s=0.4,
        peak_mb={"compiled": 60.0, "interpreter": 200.0, "torch": 90.0, "onnxruntime": 70.0},
        max_error={"compiled": 1e-6, "interpreter": 0.5, "torch": 0.0, "onnxruntime": 2e-6},
    )
    failed = ModelResult(
        "mlp", 8,
        latency_ms={"compiled": None, "interpreter": 0.2, "torch": 0.05, "onnxruntime": 0.02},
        errors={"compiled": "UnsupportedOperatorError: nn.Foo"}, others_cpu=0.3,
    )
    return Report([full, failed], MACHINE, "python -m bench.zoo_bench --quick", 75.0, 0.02, peak_gflops=400.0)


def table_rows(markdown: str, header_start: str) -> list[list[str]]:
    """The cells of the markdown table whose header row starts with header_start (header included)."""
    lines = markdown.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return [rows[0]] + rows[2:]  # without the alignment row


def test_latency_table_has_a_row_per_model_and_batch_with_ms_and_ratios():
    rows = table_rows(render_markdown(fake_report()), "| model | batch | compiled (numba) ms")
    assert rows[0] == ["model", "batch", "compiled (numba) ms", "interpreter ms", "torch eager ms", "onnxruntime ms",
                       "ncnn ms", "compiled (numba) / ort", "interpreter / ort", "torch eager / ort", "ncnn / ort"]
    assert rows[1] == ["resnet18", "1", "20.0", "400 †", "15.0", "10.0", "12.0", "2.00x", "40.0x", "1.50x", "1.20x"]
    assert rows[2] == ["mlp *", "8", "—", "0.200", "0.050", "0.020", "—", "—", "10.0x", "2.50x", "—"]


def test_throughput_table_has_flops_gflops_per_runtime_and_the_share_of_peak():
    rows = table_rows(render_markdown(fake_report()), "| model | batch | FLOPs")
    assert rows[0] == ["model", "batch", "FLOPs", "compiled (numba) GFLOP/s", "compiled (numba) % of peak",
                       "interpreter GFLOP/s", "torch eager GFLOP/s", "onnxruntime GFLOP/s", "ncnn GFLOP/s"]
    # 3.6 GFLOP in 20 ms: 180 GFLOP/s, 45% of 400
    assert rows[1] == ["resnet18", "1", "3.60 G", "180", "45%", "9.00", "240", "360", "300"]
    assert rows[2] == ["mlp", "8", "—", "—", "—", "—", "—", "—", "—"]


def test_compile_and_memory_table_has_cold_warm_and_a_peak_per_runtime():
    rows = table_rows(render_markdown(fake_report()), "| model | batch | compile cold s")
    assert rows[0] == ["model", "batch", "compile cold s", "compile warm s", "compiled (numba) MB", "interpreter MB",
                       "torch eager MB", "onnxruntime MB"]  # ncnn's memory is not probed
    assert rows[1] == ["resnet18", "1", "9.5", "0.40", "60", "200", "90", "70"]
    assert rows[2] == ["mlp", "8", "—", "—", "—", "—", "—", "—"]


def test_markdown_names_the_machine_the_command_failures_and_disturbed_rows():
    text = render_markdown(fake_report())
    assert "`python -m bench.zoo_bench --quick` on Test CPU (2 CPUs, AVX2), 2 threads per runtime; measured peak " \
           "400 GFLOP/s (float32 2048x2048 GEMM through numpy's BLAS, best of 5, 2 threads)" in text
    assert "onnxruntime 1.3, ncnn 1.0.1;" in text
    assert "the run took 75 s, other processes used 2% of the CPU" in text
    assert "- mlp batch 8, compiled: UnsupportedOperatorError: nn.Foo" in text
    assert "- †: the output differs from torch eager's" in text
    assert "- *: other processes used more than 5% of the CPU while this row was measured" in text
    assert "at batch > 1 the images run one after another" in text


def test_machine_line_reads_a_report_from_before_ncnn_isa_and_peak():
    old = {k: v for k, v in MACHINE.items() if k not in ("isa", "ncnn", "peak")}
    line = machine_line(Report([], old, "python -m bench.zoo_bench", 1.0, 0.0))
    assert "on Test CPU (2 CPUs), 2 threads per runtime; Python" in line
    assert "ncnn not recorded" in line


def test_chart_is_a_png_and_json_round_trips(tmp_path):
    paths = write_all(fake_report(), tmp_path / "zoo")
    assert [p.name for p in paths] == ["zoo.md", "zoo.png", "zoo.json"]
    png = tmp_path / "zoo.png"
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    height, width, _ = matplotlib.image.imread(png).shape
    assert width > 500 and height > 300
    assert load(tmp_path / "zoo.json") == fake_report()


def test_a_small_real_run_writes_positive_numbers_for_every_runtime(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.zoo_bench", "--models", "mlp", "--batches", "2",
                           "--repeat", "3", "--max-seconds", "0.5", "--peak-size", "512", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # one row in each table (latency, compile and memory, throughput); ' *' marks a row measured while other
    # processes were busy (other test workers)
    assert len(re.findall(r"\| mlp( \*)? \| 2 \|", (tmp_path / "zoo_partial.md").read_text())) == 3
    assert (tmp_path / "zoo_partial.png").read_bytes()[:8] == PNG_SIGNATURE
    report = json.loads((tmp_path / "zoo_partial.json").read_text())
    (result,) = report["results"]
    assert result["errors"] == {}
    for runtime in RUNTIMES:
        if runtime == "ncnn" and NCNN_SKIP:
            assert runtime not in result["latency_ms"] and report["machine"]["ncnn_skipped"] == NCNN_SKIP
            assert f"ncnn: skipped ({NCNN_SKIP})" in done.stderr
            continue
        assert result["latency_ms"][runtime] > 0
        assert result["max_error"][runtime] < 1e-4
    for runtime in MEMORY_RUNTIMES:
        assert result["peak_mb"][runtime] > 0
    assert result["compile_cold_s"] > 0 and result["compile_warm_s"] > 0
    assert result["flops"] == 2 * 2 * (64 * 128 + 128 * 128 + 128 * 10)  # batch 2, three Linear layers
    assert report["peak_gflops"] > 0
    assert report["machine"]["isa"] == isa()


def test_node_compare_matches_every_conv_of_tiny_cnn_with_onnxruntimes():
    """bench.node_compare: both forwards timed, each profiler's overhead a node estimated (not negative), and
    every conv of ours paired with onnxruntime's conv of the same output size and weight (its output channels
    maybe padded to an NCHWc block: tiny_cnn's 8-channel stem runs as 16 on AVX-512), once each."""
    from bench.node_compare import compare

    ours, theirs, rows = compare("tiny_cnn", batch=2, threads=1, rounds=1, runs=2)
    assert ours.forward_ms > 0 and theirs.forward_ms > 0
    assert ours.overhead_ms >= 0 and theirs.overhead_ms >= 0
    keys = sorted(key for _, key, _ in ours.convs)
    assert len(keys) == len(theirs.convs) == 4  # tiny_cnn's convs
    assert len(rows) == len(keys) and {name for *_, name, _ in rows} == {name for name, *_ in ours.convs}
    for diff, mine, other, _, _ in rows:
        assert diff == mine - other and all(key[0] == 2 for _, key, _ in ours.convs)
    assert [r[0] for r in rows] == sorted((r[0] for r in rows), reverse=True)


def test_node_compare_matches_a_conv_whose_output_channels_onnxruntime_padded():
    from bench.node_compare import _matching_key

    ours = (1, 32, 32, 8, 3, 3, 3)
    assert _matching_key(ours, {ours: [1.0]}) == ours
    assert _matching_key(ours, {(1, 32, 32, 16, 3, 3, 3): [1.0]}) == (1, 32, 32, 16, 3, 3, 3)
    assert _matching_key(ours, {(1, 32, 32, 32, 3, 3, 3): [1.0], (1, 16, 16, 16, 3, 3, 3): [1.0]}) is None
    assert _matching_key(ours, {ours: []}) is None  # each of theirs matched once


# -- FLOPs, peak, ncnn ----------------------------------------------------------------------


def _value(name: str, *shape: int) -> Value:
    return Value(name, TensorType(shape, "float32"))


def test_flops_of_a_hand_built_graph_are_two_per_multiply_add():
    x, w1 = _value("x", 2, 3, 10, 10), _value("w1", 8, 3, 3, 3)
    conv = make_node("conv2d", "conv", [x, w1], ["c"], {"stride": (2, 2), "padding": (1, 1, 1, 1)})
    w2 = _value("w2", 8, 1, 3, 3)  # depthwise
    dw = make_node("conv2d", "dw", [conv.outputs[0], w2], ["d"], {"padding": (1, 1, 1, 1), "groups": 8})
    up_w = _value("up_w", 8, 4, 2, 2)
    up = make_node("conv_transpose2d", "up", [dw.outputs[0], up_w], ["u"], {"stride": (2, 2)})
    a, b = _value("a", 2, 4, 5, 6), _value("b", 2, 4, 6, 7)
    mm = make_node("matmul", "mm", [a, b], ["m"])
    h, w3 = _value("h", 2, 5, 16), _value("w3", 10, 16)
    fc = make_node("linear", "fc", [h, w3], ["y"])
    nodes = [conv, dw, up, mm, fc]
    graph = Graph("g", [x, a, b, h], [up.outputs[0], mm.outputs[0], fc.outputs[0]], nodes,
                  [w1, w2, up_w, w3])
    assert conv.outputs[0].shape == (2, 8, 5, 5) and up.outputs[0].shape == (2, 4, 10, 10)
    expected = 2 * (
        2 * 8 * 5 * 5 * (3 * 3 * 3)  # conv: each output, Cin * KH * KW
        + 2 * 8 * 5 * 5 * (1 * 3 * 3)  # depthwise: Cin / groups = 1
        + 2 * 8 * 5 * 5 * (4 * 2 * 2)  # transposed: each input pixel and channel, Cout * KH * KW taps
        + 2 * 4 * 5 * 7 * 6  # matmul: each output, K = 6
        + 2 * 5 * 10 * 16  # linear
    )
    assert graph_flops(graph) == expected


def test_flops_of_recurrent_layers_count_every_step_and_direction():
    x, h0, c0 = _value("x", 2, 9, 5), _value("h0", 2, 2, 3), _value("c0", 2, 2, 4)  # batch_first, proj_size 3
    w_ih, w_hh, w_hr = _value("w_ih", 2, 16, 5), _value("w_hh", 2, 16, 3), _value("w_hr", 2, 3, 4)
    b = _value("b", 2, 16)
    lstm = make_node("lstm", "lstm", [x, h0, c0, w_ih, w_hh, b, b, w_hr], ["y", "h", "c"], {"batch_first": True})
    g0, gw_ih, gw_hh, gb = _value("g0", 1, 9, 6), _value("gw_ih", 1, 18, 6), _value("gw_hh", 1, 18, 6), _value(
        "gb", 1, 18)
    gru = make_node("gru", "gru", [lstm.outputs[0], g0, gw_ih, gw_hh, gb, gb], ["z", "hz"])
    graph = Graph("g", [x, h0, c0, g0], [gru.outputs[0]], [lstm, gru], [w_ih, w_hh, w_hr, b, gw_ih, gw_hh, gb])
    assert lstm.outputs[0].shape == (2, 9, 6) and gru.outputs[0].shape == (2, 9, 6)
    expected = (2 * 2 * 9 * 2 * (16 * (5 + 3) + 3 * 4)  # lstm: 18 rows, 2 directions, W_ih, W_hh, W_hr
                + 2 * 2 * 9 * 1 * 18 * (6 + 6))  # gru, not batch_first: 2 steps of 9 rows, one direction
    assert graph_flops(graph) == expected


def test_flops_of_tiny_cnn_from_its_pnnx_export_match_a_hand_count():
    param = export_zoo("tiny_cnn", batch=2)  # cached, as the zoo tests export it
    per_image = (
        8 * 32 * 32 * (3 * 3 * 3)  # stem: 3->8, 3x3 'same' on 32x32 (then max-pool to 16x16)
        + 16 * 8 * 8 * (8 * 3 * 3)  # conv2: 8->16, 3x3 stride 2 -> 8x8
        + 2 * 16 * 8 * 8 * (16 * 3 * 3)  # res: two 16->16 3x3 on 8x8
        + 10 * 16  # fc: 16->10 (batch norms, ReLUs, pools and the bias adds count nothing)
    )
    assert model_flops(param) == 2 * 2 * per_image  # batch 2, 2 FLOPs per multiply-add


def test_peak_is_a_positive_gemm_rate_and_the_isa_is_named():
    assert measure_peak_gflops(threads=1, n=256, repeat=2) > 0
    assert isa() in ("AVX-512", "AVX2", "SSE", os.uname().machine)


@pytest.mark.skipif(NCNN_SKIP is not None, reason=f"ncnn runtime: {NCNN_SKIP}")
def test_ncnn_runs_tiny_cnn_like_torch_image_by_image(tmp_path):
    entry = zoo.get("tiny_cnn")
    module, x = entry.build(), zoo.make_input(entry, batch=3)
    run = ncnn_runtime("tiny_cnn", threads=1, cache_dir=tmp_path)  # a fresh conversion: pnnx, ~2 s
    assert run.net.opt.num_threads == 1
    (y,) = run(x)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    assert y.shape == expected.shape == (3, 10)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    assert sorted(p.name for p in tmp_path.glob("*-ncnn/*")) == ["tiny_cnn.ncnn.bin", "tiny_cnn.ncnn.param"]


@pytest.mark.skipif(NCNN_SKIP is not None, reason=f"ncnn runtime: {NCNN_SKIP}")
def test_ncnn_net_refuses_missing_files(tmp_path):
    with pytest.raises(RuntimeError, match="ncnn could not load"):
        ncnn_net(tmp_path / "none.ncnn.param", tmp_path / "none.ncnn.bin", 1)


def test_call_overhead_times_each_part_of_a_call(capsys):
    """bench.call_overhead compiles its trivial model, checks its output, and prints a positive time
    for the whole call and for each part (it must keep up with the model's run surface)."""
    from bench import call_overhead

    call_overhead.main(["--calls", "20"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("  ")[0].strip() for line in lines][0] == "m(x): the whole call"
    times = [float(re.search(r"([\d.]+) us$", line).group(1)) for line in lines]
    assert len(times) == 3 and all(t > 0 for t in times)


def test_timing_rounds_keep_each_runtimes_best_and_time_the_interpreter_once(monkeypatch):
    """check_and_time: each runtime's output is checked once, then timed in rounds one runtime after
    another; a runtime slow in one round (a slow spell of the machine) keeps its best round."""
    from bench import zoo_bench

    spells = {"compiled": [9.0, 5.0, 7.0], "onnxruntime": [4.0, 6.0, 4.5], "interpreter": [50.0]}
    x = np.ones(3, np.float32)
    called, timed = [], []

    def runtime(name):
        def run(inputs):
            called.append(name)
            return inputs
        return run

    def fake_median_ms(fn, warmup, repeat, seconds):
        fn()
        timed.append((called[-1], seconds))
        return spells[called[-1]][sum(1 for n, _ in timed if n == called[-1]) - 1]

    monkeypatch.setattr(zoo_bench, "median_ms", fake_median_ms)
    result = ModelResult("m", 1)
    options = zoo_bench.Options(threads=2, repeat=10, max_seconds=9.0, memory=False, rounds=3)
    zoo_bench.check_and_time(result, {name: runtime(name) for name in spells}, x, [x], options)
    assert called[:3] == ["compiled", "onnxruntime", "interpreter"]  # the checks, before any timing
    assert result.max_error == {"compiled": 0.0, "onnxruntime": 0.0, "interpreter": 0.0}
    assert result.latency_ms == {"compiled": 5.0, "onnxruntime": 4.0, "interpreter": 50.0}
    assert [n for n, _ in timed] == ["compiled", "onnxruntime", "interpreter"] + ["compiled", "onnxruntime"] * 2
    assert {s for n, s in timed if n != "interpreter"} == {3.0} and dict(timed)["interpreter"] == 9.0
