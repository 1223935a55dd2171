"""A fixed-seed few thousand mutants of real pnnx files (tests/fuzz_models.py): each loads and runs the
same on both backends, or raises one of our typed errors, in bounded time and memory. The long run is
`python -m tests.fuzz_models --cases 100000`."""

from __future__ import annotations

import io
import json
import random
import struct
import subprocess
import sys
import tracemalloc
import zipfile

import numpy as np
import pytest

import compiler
from compiler import ModelFormatError
from tests import fuzz_models


def test_three_thousand_mutants_load_and_agree_or_raise_typed_errors():
    """In a process of its own, so that its peak memory is the mutants' and not that of whatever else this
    test worker ran before (a worker's peak RSS is a high-water mark over all its tests). Every 15th mutant that
    runs compiles with numba too (27 of 3000; each a model of its own, compiled in 1-2 s, most of the test's
    time: every 10th took 2.5x the time of every 20th)."""
    done = subprocess.run([sys.executable, "-m", "tests.fuzz_models", "--cases", "3000", "--seed", "20261126",
                           "--numba-every", "15", "--json"], cwd=fuzz_models.ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    counts = report["counts"]
    assert sum(counts.values()) == 3000
    assert report["max_rss_kib"] < 2 << 20, report  # no mutant took gigabytes (the whole run: ~0.8 GiB)
    ran = counts["ran on interpreter and executor"] + counts["ran on all three"]
    assert ran >= 300 and counts["ran on all three"] >= 20, counts  # the backends compared on what still runs
    assert counts["rejected: ModelFormatError"] >= 1000, counts


@pytest.fixture(scope="module")
def seeds():
    return fuzz_models.corpus()


def test_a_zip_bomb_is_refused_before_it_inflates(seeds, tmp_path):
    """An entry of 1 MiB that would inflate to 1 GiB: refused with the reason, using little memory."""
    param_text, data = fuzz_models.zip_bomb(seeds[0], random.Random(0))
    (tmp_path / "m.pnnx.param").write_text(param_text)
    (tmp_path / "m.pnnx.bin").write_bytes(data)
    tracemalloc.start()
    try:
        with pytest.raises(ModelFormatError, match=r"would inflate to 1073741824 .*refused, as a zip bomb would be"):
            compiler.compile(tmp_path / "m.pnnx.param", backend="interpreter")
        assert tracemalloc.get_traced_memory()[1] < 64 << 20
    finally:
        tracemalloc.stop()


def test_a_deflated_bin_reads_like_the_stored_one(seeds, tmp_path):
    """pnnx stores its entries; a zip tool may deflate them: the weights read the same."""
    seed = seeds[0]
    rng = random.Random(1)
    data = seed.bin
    for _ in range(8):
        data = fuzz_models.compressed_entry(data, rng)
    (tmp_path / "m.pnnx.param").write_text(seed.param)
    (tmp_path / "m.pnnx.bin").write_bytes(data)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    deflated = compiler.compile(tmp_path / "m.pnnx.param", backend="interpreter")(x)
    np.testing.assert_array_equal(deflated, compiler.compile(fuzz_models.SHIPPED, backend="interpreter")(x))


def test_a_layer_count_of_1e30_is_a_format_error_not_a_hang(seeds, tmp_path):
    """Found by the fuzzer: num_layers=1e30 on a GRU made a list of zero states per layer."""
    seed = next(s for s in seeds if s.name == "lstm_gru_mini")
    (tmp_path / "m.pnnx.param").write_text(seed.param.replace("num_layers=1 ", "num_layers=1e30 ", 1))
    (tmp_path / "m.pnnx.bin").write_bytes(seed.bin)
    with pytest.raises(ModelFormatError, match=r"param num_layers=1e\+30 is not an int of at least 1"):
        compiler.compile(tmp_path / "m.pnnx.param", backend="interpreter")


def test_a_flipped_bit_in_a_weight_is_a_format_error_not_a_silent_run(seeds, tmp_path):
    """Found by the fuzzer: a bit flipped in a stored entry's data loaded silently (the reader maps stored
    entries); its CRC-32 now catches it."""
    seed = seeds[0]
    info = zipfile.ZipFile(io.BytesIO(seed.bin)).getinfo("convbn2d_1.weight")
    name_length, extra_length = struct.unpack("<HH", seed.bin[info.header_offset + 26:info.header_offset + 30])
    data = bytearray(seed.bin)
    data[info.header_offset + 30 + name_length + extra_length + 17] ^= 0x40  # inside the weight's bytes
    (tmp_path / "m.pnnx.param").write_text(seed.param)
    (tmp_path / "m.pnnx.bin").write_bytes(bytes(data))
    with pytest.raises(ModelFormatError, match=r"corrupt zip entry 'convbn2d_1.weight': its bytes do not match its "
                                               r"CRC-32"):
        compiler.compile(tmp_path / "m.pnnx.param", backend="interpreter")
