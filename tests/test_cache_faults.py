"""The AOT cache under faults: compiles killed mid-write, many processes at once, tampered entries, a
full or read-only disk, and its size (weights stored once, least recently used entries evicted)."""

from __future__ import annotations

import errno
import logging
import os
import pickle
import random
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.cache import ModelCache
from compiler.numba_backend import NumbaModel
from tests.test_cache import EXPECTED, MODEL, ROOT, SCALE, X
from tests.test_cache import _compile_in_subprocess as start_compile
from tests.test_cache import _result as finished

SHIPPED = Path(compiler.__file__).parent / "data" / "tiny_cnn.pnnx.param"


def write_model(directory: Path, scale: np.ndarray = SCALE) -> Path:
    """tests/test_cache.py's model (sigmoid(x) * scale) with these scale weights."""
    directory.mkdir(parents=True, exist_ok=True)
    param = directory / "m.pnnx.param"
    param.write_text(f"7767517\n{len(MODEL)} 4\n" + "\n".join(MODEL) + "\n")
    with zipfile.ZipFile(directory / "m.pnnx.bin", "w") as z:
        z.writestr("scale.data", scale.astype(np.float32).tobytes())
    return param


def complete_entries(cache: Path) -> list[Path]:
    """Every entry directory (not a build under way); each must hold a whole, valid entry."""
    models = cache / "models"
    return [p for p in models.iterdir() if p.is_dir() and not p.name.startswith(".")] if models.is_dir() else []


def test_a_compile_killed_at_random_points_never_leaves_a_partial_entry(tmp_path):
    """SIGKILL at random moments of ten compiles (importing, lowering, generating, writing the entry,
    linking); after each, every entry directory is complete and valid; the next compile runs right,
    and the builds the killed processes left behind are removed."""
    cache, model = tmp_path / "cache", write_model(tmp_path / "model")
    rng = random.Random(0)
    for _ in range(10):
        proc = start_compile(model, cache)
        time.sleep(rng.uniform(0.5, 4.0))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        for entry in complete_entries(cache):
            assert ModelCache(cache).load(entry.name) is not None, entry  # whole, or not there at all
    result = finished(start_compile(model, cache))
    np.testing.assert_allclose(result["y"], EXPECTED, rtol=1e-6)
    ModelCache(cache).evict()
    assert not list((cache / "models").glob(".*.tmp*")), "a killed build's directory was left behind"
    assert compiler.compile(model, cache_dir=cache).cache_info.hit


def test_sixteen_processes_eight_on_one_model_eight_on_others(tmp_path):
    """8 processes compile one model and 8 compile 8 other models into one cache at once: all succeed,
    and the cache holds one entry per model."""
    cache = tmp_path / "cache"
    shared = write_model(tmp_path / "shared")
    others = [write_model(tmp_path / f"other{i}", SCALE + i + 1) for i in range(8)]
    procs = [start_compile(shared, cache) for _ in range(8)] + [start_compile(m, cache) for m in others]
    results = [finished(p) for p in procs]
    assert len({r["key"] for r in results[:8]}) == 1
    for r in results[:8]:
        np.testing.assert_allclose(r["y"], EXPECTED, rtol=1e-6)
    for i, r in enumerate(results[8:]):
        np.testing.assert_allclose(r["y"], (SCALE + i + 1) / (1 + np.exp(-X)), rtol=1e-6)
    assert sorted(p.name for p in complete_entries(cache)) == sorted({r["key"] for r in results})
    assert all(ModelCache(cache).load(r["key"]) is not None for r in results)


def test_an_entry_swapped_for_another_models_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    one, two = write_model(tmp_path / "one"), write_model(tmp_path / "two", SCALE * 3)
    a = compiler.compile(one, cache_dir=cache).cache_info.path
    b = compiler.compile(two, cache_dir=cache).cache_info.path
    a.rename(tmp_path / "a")
    b.rename(a)  # the entry of `two`, whole and self-consistent, under `one`'s key
    m = compiler.compile(one, cache_dir=cache)
    assert not m.cache_info.hit
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)


class _Planted:
    """Unpickling it would create a file: it must never be unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_replaced_pickle_is_rebuilt_never_unpickled(tmp_path):
    cache, model = tmp_path / "cache", write_model(tmp_path / "model")
    entry = compiler.compile(model, cache_dir=cache).cache_info.path
    marker = tmp_path / "the pickle ran"
    (entry / "linkage.pkl").write_bytes(pickle.dumps(_Planted(marker)))
    m = compiler.compile(model, cache_dir=cache)
    assert not m.cache_info.hit and not marker.exists()
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)


def test_an_edited_forward_is_rebuilt_never_run(tmp_path):
    cache, model = tmp_path / "cache", write_model(tmp_path / "model")
    entry = compiler.compile(model, cache_dir=cache).cache_info.path
    marker = tmp_path / "the edit ran"
    source = (entry / "forward.py").read_text()
    (entry / "forward.py").write_text(f"open({str(marker)!r}, 'w').close()\n" + source)
    m = compiler.compile(model, cache_dir=cache)
    assert not m.cache_info.hit and not marker.exists()
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   PermissionError(errno.EROFS, "Read-only file system")])
def test_a_full_or_read_only_disk_still_compiles_and_runs_with_one_warning(tmp_path, monkeypatch, caplog, error):
    """Writing the entry fails (the disk is full, the file system read-only): the model compiles without
    the cache and runs; the warning comes once however many models compile."""
    def cannot_write(*args, **kwargs):
        raise error

    monkeypatch.setattr(NumbaModel, "write_entry", classmethod(cannot_write))
    cache = tmp_path / "cache"
    with caplog.at_level(logging.WARNING, logger="compiler.numba_backend"):
        for i in range(3):
            m = compiler.compile(write_model(tmp_path / f"m{i}", SCALE + i), cache_dir=cache)
            np.testing.assert_allclose(m(X), (SCALE + i) / (1 + np.exp(-X)), rtol=1e-6)
            assert m.cache_info.path is None and error.strerror in m.cache_info.reason
    warnings = [r for r in caplog.records if "not using the compile cache" in r.message]
    assert len(warnings) == 1 and error.strerror in warnings[0].message


def test_a_disk_that_fills_while_the_weights_are_written_leaves_no_entry(tmp_path, monkeypatch, caplog):
    """The weights file is written on a thread while the forward is linked: when that write fails half-way
    (the disk fills), the error reaches the compile, which runs without the cache, and no entry or
    half-written build directory is left; the next compile with room builds the entry."""
    import compiler.numba_backend as backend

    written = backend.write_digested

    def fills_half_way(path, write):
        path.write_bytes(b"\x93NUMPY half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(backend, "write_digested", fills_half_way)
    cache, model = tmp_path / "cache", write_model(tmp_path / "model")
    with caplog.at_level(logging.WARNING, logger="compiler.numba_backend"):
        m = compiler.compile(model, cache_dir=cache)
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)
    assert m.cache_info.path is None and "No space left on device" in m.cache_info.reason
    assert [p.name for p in (cache / "models").iterdir() if p.is_dir()] == []  # no entry, no build directory
    monkeypatch.setattr(backend, "write_digested", written)
    m = compiler.compile(model, cache_dir=cache)
    assert not m.cache_info.hit and m.cache_info.path is not None
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)
    assert compiler.compile(model, cache_dir=cache).cache_info.hit


def test_a_read_only_cache_still_loads_its_entries(tmp_path, monkeypatch):
    """Loading writes nothing the load needs: an entry's last use is recorded if it can be."""
    cache, model = tmp_path / "cache", write_model(tmp_path / "model")
    compiler.compile(model, cache_dir=cache)

    def read_only(*args, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "utime", read_only)
    m = compiler.compile(model, cache_dir=cache)
    assert m.cache_info.hit
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)


def test_specializations_store_their_weights_once(tmp_path):
    """Batches 4 and 8 of the shipped model pack the same weights (batch 1 packs its classifier
    differently: one row streams the weight as it is): one file for both."""
    cache = tmp_path / "cache"
    m = compiler.compile(SHIPPED, cache_dir=cache)
    for batch in (4, 8):
        m.specialize({"in0": (batch, 3, 32, 32)})
    assert len(complete_entries(cache)) == 3
    links = sorted(w.stat().st_nlink for w in (cache / "weights").iterdir())
    assert links == [2, 3]  # the store's link and one per entry
    shared = max((cache / "weights").iterdir(), key=lambda w: w.stat().st_nlink).stat().st_size
    assert ModelCache(cache).disk_bytes() == sum(e.size for e in ModelCache(cache).entries()) - shared


def test_least_recently_used_entries_go_first_when_the_cache_is_full(tmp_path):
    cache = tmp_path / "cache"
    models = [write_model(tmp_path / f"m{i}", SCALE * (i + 1)) for i in range(4)]
    keys = [compiler.compile(m, cache_dir=cache).cache_info.key for m in models]
    store = ModelCache(cache)
    for age, key in enumerate(keys):  # m0 used longest ago ... m3 last; then m0 is used again
        os.utime(store.entry_dir(key) / "meta.json", (1000 + age, 1000 + age))
    assert compiler.compile(models[0], cache_dir=cache).cache_info.hit
    sizes = {e.key: e.size for e in store.entries()}
    removed = store.evict(max_bytes=store.disk_bytes() - sizes[keys[1]] - sizes[keys[2]] + 1)
    assert removed == [keys[1], keys[2]]
    assert sorted(e.key for e in store.entries()) == sorted([keys[0], keys[3]])
    assert not [w for w in (cache / "weights").iterdir() if w.stat().st_nlink <= 1]  # their weights went too


def test_a_new_entry_keeps_the_cache_to_its_limit(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = compiler.compile(write_model(tmp_path / "a"), cache_dir=cache).cache_info
    monkeypatch.setenv("PNNX_JIT_CACHE_MAX_BYTES", str(ModelCache(cache).disk_bytes() + 1024))
    second = compiler.compile(write_model(tmp_path / "b", SCALE * 2), cache_dir=cache).cache_info
    assert [e.key for e in ModelCache(cache).entries()] == [second.key]
    assert not first.path.exists()


def test_cache_list_shows_sizes_and_last_use(tmp_path):
    cache = tmp_path / "cache"
    compiler.compile(write_model(tmp_path / "a"), cache_dir=cache)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    listed = subprocess.run([sys.executable, "-m", "compiler", "cache", "list", "--cache-dir", str(cache)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()[:2]
    assert "MiB" in header and "last used" in header
    assert time.strftime("%Y-%m-%d") in row and " m " in f" {row.split()[1]} "
    pruned = subprocess.run([sys.executable, "-m", "compiler", "cache", "prune", "--max-bytes", "0",
                             "--cache-dir", str(cache)], env=env, capture_output=True, text=True, timeout=300)
    assert pruned.returncode == 0 and "removed 1 entries" in pruned.stdout
    assert not ModelCache(cache).entries() and ModelCache(cache).disk_bytes() == 0
