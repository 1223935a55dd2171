"""The zoo benchmark's harness: its tables, chart and JSON on made-up results, and one small real run.

No timing assertions: speed targets live in the benchmark's output, never in tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import matplotlib.image

from bench.zoo_report import RUNTIMES, ModelResult, Report, load, render_markdown, write_all

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MACHINE = {"cpu": "Test CPU", "cpus": "2", "threads": "2", "python": "3.11", "numpy": "2", "numba": "0.6",
           "torch": "2.13", "onnxruntime": "1.3", "commit": "abc1234", "date": "2026-01-01 00:00 UTC"}


def fake_report() -> Report:
    full = ModelResult(
        "resnet18", 1,
        latency_ms={"compiled": 20.0, "interpreter": 400.0, "torch": 15.0, "onnxruntime": 10.0},
        compile_cold_s=9.5, compile_warm_s=0.4,
        peak_mb={"compiled": 60.0, "interpreter": 200.0, "torch": 90.0, "onnxruntime": 70.0},
        max_error={"compiled": 1e-6, "interpreter": 0.5, "torch": 0.0, "onnxruntime": 2e-6},
    )
    failed = ModelResult(
        "mlp", 8,
        latency_ms={"compiled": None, "interpreter": 0.2, "torch": 0.05, "onnxruntime": 0.02},
        errors={"compiled": "UnsupportedOperatorError: nn.Foo"}, others_cpu=0.3,
    )
    return Report([full, failed], MACHINE, "python -m bench.zoo_bench --quick", 75.0, 0.02)


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
                       "compiled (numba) / ort", "interpreter / ort", "torch eager / ort"]
    assert rows[1] == ["resnet18", "1", "20.0", "400 †", "15.0", "10.0", "2.00x", "40.0x", "1.50x"]
    assert rows[2] == ["mlp *", "8", "—", "0.200", "0.050", "0.020", "—", "10.0x", "2.50x"]


def test_compile_and_memory_table_has_cold_warm_and_a_peak_per_runtime():
    rows = table_rows(render_markdown(fake_report()), "| model | batch | compile cold s")
    assert rows[0] == ["model", "batch", "compile cold s", "compile warm s", "compiled (numba) MB", "interpreter MB",
                       "torch eager MB", "onnxruntime MB"]
    assert rows[1] == ["resnet18", "1", "9.5", "0.40", "60", "200", "90", "70"]
    assert rows[2] == ["mlp", "8", "—", "—", "—", "—", "—", "—"]


def test_markdown_names_the_machine_the_command_failures_and_disturbed_rows():
    text = render_markdown(fake_report())
    assert "`python -m bench.zoo_bench --quick` on Test CPU (2 CPUs), 2 threads" in text
    assert "the run took 75 s, other processes used 2% of the CPU" in text
    assert "- mlp batch 8, compiled: UnsupportedOperatorError: nn.Foo" in text
    assert "- †: the output differs from torch eager's" in text
    assert "- *: other processes used more than 5% of the CPU while this row was measured" in text


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
                           "--repeat", "3", "--max-seconds", "0.5", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # one row in each table; ' *' marks a row measured while other processes were busy (other test workers)
    assert len(re.findall(r"\| mlp( \*)? \| 2 \|", (tmp_path / "zoo_partial.md").read_text())) == 2
    assert (tmp_path / "zoo_partial.png").read_bytes()[:8] == PNG_SIGNATURE
    (result,) = json.loads((tmp_path / "zoo_partial.json").read_text())["results"]
    assert result["errors"] == {}
    for runtime in RUNTIMES:
        assert result["latency_ms"][runtime] > 0
        assert result["peak_mb"][runtime] > 0
        assert result["max_error"][runtime] < 1e-4
    assert result["compile_cold_s"] > 0 and result["compile_warm_s"] > 0
