"""The AOT cache: hits and misses, fresh processes, concurrent compiles, corruption, trust; when
the kernel library's numba cache is dropped; what the key covers."""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import codegen.runtime
import compiler
import compiler.cache

ROOT = Path(__file__).resolve().parents[1]
MODEL = [
    "pnnx.Input in 0 1 0 #0=(2,3)f32",
    "pnnx.Attribute scale 0 1 1 @data=(3)f32 #1=(3)f32",
    "F.sigmoid s 1 1 0 2 $input=0 #0=(2,3)f32 #2=(2,3)f32",
    "pnnx.Expression e 2 1 2 1 3 expr=mul(@0,@1) #2=(2,3)f32 #1=(3)f32 #3=(2,3)f32",
    "pnnx.Output out 1 0 3",
]
SCALE = np.array([1.0, 2.0, 3.0], np.float32)
X = np.array([[0.0, 1.0, -1.0], [2.0, -2.0, 0.5]], np.float32)
EXPECTED = SCALE / (1 + np.exp(-X))


@pytest.fixture
def model(tmp_path) -> Path:
    param = tmp_path / "m.pnnx.param"
    param.write_text(f"7767517\n{len(MODEL)} 4\n" + "\n".join(MODEL) + "\n")
    with zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w") as z:
        z.writestr("scale.data", SCALE.tobytes())
    return param


def test_second_compile_is_a_hit_with_the_same_result(model, tmp_path):
    cache = tmp_path / "cache"
    first = compiler.compile(model, cache_dir=cache)
    second = compiler.compile(model, cache_dir=cache)
    assert (first.cache_info.hit, second.cache_info.hit) == (False, True)
    assert first.cache_info.key == second.cache_info.key and second.cache_info.path.is_dir()
    assert second.cache_info.path.parent == cache / "models"
    np.testing.assert_allclose(second(X), EXPECTED, rtol=1e-6)


def test_the_first_call_runs_the_code_loaded_up_front(model, tmp_path):
    cache = tmp_path / "cache"
    compiler.compile(model, cache_dir=cache)
    m = compiler.compile(model, cache_dir=cache)  # a hit: numba loads the machine code, runs nothing
    assert m.cache_info.hit and len(m._forward.signatures) == 1
    np.testing.assert_allclose(m(X.astype(np.float64)), EXPECTED, rtol=1e-6)
    assert len(m._forward.signatures) == 1  # no second specialisation compiled at the first call


def test_key_changes_with_weights_and_options(model, tmp_path):
    cache = tmp_path / "cache"
    base = compiler.compile(model, cache_dir=cache).cache_info.key
    assert compiler.compile(model, cache_dir=cache, fuse=False).cache_info.key != base
    with zipfile.ZipFile(tmp_path / "m.pnnx.bin", "w") as z:
        z.writestr("scale.data", (SCALE * 2).tobytes())
    m = compiler.compile(model, cache_dir=cache)
    assert m.cache_info.key != base and not m.cache_info.hit
    np.testing.assert_allclose(m(X), 2 * EXPECTED, rtol=1e-6)


LOAD_SCRIPT = """
import json, sys, time
start = time.perf_counter()
import numpy as np, compiler
m = compiler.compile(sys.argv[1], cache_dir=sys.argv[2])
y = m(np.array([[0.0, 1.0, -1.0], [2.0, -2.0, 0.5]], np.float32))
print(json.dumps({"hit": m.cache_info.hit, "key": m.cache_info.key, "y": y.tolist(),
                  "seconds": time.perf_counter() - start}))
"""


def _compile_in_subprocess(model: Path, cache: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT, str(model), str(cache)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_fresh_process_loads_from_the_cache(model, tmp_path):
    cache = tmp_path / "cache"
    compiler.compile(model, cache_dir=cache)
    result = _result(_compile_in_subprocess(model, cache))
    assert result["hit"] is True
    np.testing.assert_allclose(result["y"], EXPECTED, rtol=1e-6)


SHIPPED = Path(compiler.__file__).parent / "data" / "tiny_cnn.pnnx.param"  # conv, pool, linear, elementwise
RUN_SHIPPED = """
import json, sys
import numpy as np, compiler
from numba.core.base import BaseContext
refreshes = []  # numba's typing and lowering registries refreshed: only compiling needs them
_refresh = BaseContext.refresh
BaseContext.refresh = lambda self: (refreshes.append(1), _refresh(self))[1]
m = compiler.compile(sys.argv[1], cache_dir=sys.argv[2])
x = np.random.default_rng(0).normal(size=m.inputs[0].shape).astype(np.float32)
y = m(x)
print(json.dumps({"hit": m.cache_info.hit, "y": y.tolist(), "refreshes": len(refreshes),
                  "scipy.linalg": "scipy.linalg" in sys.modules}))
"""


def test_a_fresh_process_loads_the_forward_and_its_kernels_without_compiling(tmp_path):
    cache = tmp_path / "cache"
    m = compiler.compile(SHIPPED, cache_dir=cache)
    x = np.random.default_rng(0).normal(size=m.inputs[0].shape).astype(np.float32)
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUMBA_DEBUG_CACHE="1")
    out = subprocess.run([sys.executable, "-c", RUN_SHIPPED, str(SHIPPED), str(cache)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["hit"] is True
    np.testing.assert_array_equal(np.array(result["y"], np.float32), m(x))
    assert "[cache] data loaded from" in out.stdout
    saved = [line for line in out.stdout.splitlines() if "saved to" in line]
    assert not saved, saved  # numba compiled nothing: the forward and its kernels came from its cache
    assert result["refreshes"] == 0  # and loaded them without numba's registries (numba_cache.load_cached)
    if codegen.runtime.scipy_blas_library() is not None:  # scipy's BLAS set up without importing scipy.linalg
        assert result["scipy.linalg"] is False


def test_concurrent_compiles_all_succeed_and_leave_one_entry(model, tmp_path):
    cache = tmp_path / "cache"
    procs = [_compile_in_subprocess(model, cache) for _ in range(3)]
    results = [_result(p) for p in procs]
    assert len({r["key"] for r in results}) == 1
    for r in results:
        np.testing.assert_allclose(r["y"], EXPECTED, rtol=1e-6)
    entries = [p for p in (cache / "models").iterdir() if p.is_dir()]
    assert [p.name for p in entries] == [results[0]["key"]]
    assert compiler.compile(model, cache_dir=cache).cache_info.hit


def test_corrupt_entry_is_reported_and_rebuilt(model, tmp_path, caplog):
    cache = tmp_path / "cache"
    entry = compiler.compile(model, cache_dir=cache).cache_info.path
    weights = next(entry.glob("weights_*.npy"))
    weights.write_bytes(weights.read_bytes()[:-8])  # truncated
    with caplog.at_level(logging.DEBUG, logger="compiler.cache"):
        m = compiler.compile(model, cache_dir=cache)
    assert not m.cache_info.hit
    assert any("does not match its checksum" in r.message for r in caplog.records)
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)
    assert compiler.compile(model, cache_dir=cache).cache_info.hit


@pytest.mark.parametrize("name", ["forward.py", "kernels.py", "linkage.pkl", "graph.ir"])
def test_same_size_corruption_of_a_small_file_is_rebuilt(model, tmp_path, caplog, name):
    cache = tmp_path / "cache"
    entry = compiler.compile(model, cache_dir=cache).cache_info.path
    path = entry / name
    before = path.stat()
    text = path.read_bytes()
    path.write_bytes(text[:-2] + b"#\n")  # same size, same mtime: only the checksum can tell
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with caplog.at_level(logging.DEBUG, logger="compiler.cache"):
        m = compiler.compile(model, cache_dir=cache)
    assert not m.cache_info.hit
    assert any(f"{name} does not match its checksum" in r.message for r in caplog.records)
    assert (entry / name).read_bytes() == text
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)


def _digested(monkeypatch) -> list[str]:
    """The names of the files compiler.cache hashes from now on."""
    names: list[str] = []
    digest = compiler.cache.file_digest

    def recording(path: Path) -> str:
        names.append(path.name)
        return digest(path)

    monkeypatch.setattr(compiler.cache, "file_digest", recording)
    return names


def test_large_entry_files_are_checked_by_stat_and_hashed_when_their_mtime_moved(model, tmp_path, monkeypatch):
    monkeypatch.setattr(compiler.cache, "BIG_FILE", 100)  # the tiny model's weights count as large
    cache = tmp_path / "cache"
    entry = compiler.compile(model, cache_dir=cache).cache_info.path
    weights = next(entry.glob("weights_*.npy"))
    assert weights.stat().st_size >= 100
    digested = _digested(monkeypatch)
    assert compiler.compile(model, cache_dir=cache).cache_info.hit
    assert weights.name not in digested

    os.utime(weights, ns=(0, 10**9))  # a copied entry: same bytes, another mtime
    digested.clear()
    assert compiler.compile(model, cache_dir=cache).cache_info.hit
    assert weights.name in digested

    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # same size, new mtime: hashed, and rebuilt
    weights.write_bytes(bytes(data))
    m = compiler.compile(model, cache_dir=cache)
    assert not m.cache_info.hit
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)


def test_building_an_entry_hashes_its_weights_as_it_writes_them(model, tmp_path, monkeypatch):
    """The weights file is hashed as it is written (write_digested), to name its copy in weights/, and
    the entry's record reuses that digest: reading 50-100 MB back to hash them cost a tenth of a second
    a compile. Both ways share() goes: publishing the first copy, and linking the entry to a copy
    another entry published (whose soundness it checks by hashing that copy)."""
    cache = tmp_path / "cache"
    digested = _digested(monkeypatch)
    for options in ({}, {"threads": 1}):  # a second entry with the same weights links to the first's copy
        digested.clear()
        entry = compiler.compile(model, cache_dir=cache, **options).cache_info.path
        weights = next(entry.glob("weights_*.npy"))
        assert not [name for name in digested if name.startswith("weights_")], digested
        record = json.loads((entry / "meta.json").read_text())["files"][weights.name]
        assert record["digest"] == compiler.cache.file_digest(weights)
        assert (cache / "weights" / f"{record['digest']}.npy").samefile(weights)
    assert weights.stat().st_nlink == 3  # weights/ and both entries


def test_a_weights_file_written_as_it_streams_is_what_np_save_writes(tmp_path):
    """WeightPack.write_npy streams the constants into the file without the packed array in memory: the
    same bytes as np.save of the packed array (alignment gaps zeroed, several dtypes, an empty constant,
    a prepacked array, a constant of another dtype than its data), and write_digested's digest is
    file_digest's."""
    from codegen.emitter import WeightPack

    class Constant:  # what WeightPack reads of a Value
        def __init__(self, data, dtype=None):
            self.data, self.dtype = data, dtype or data.dtype.name

    rng = np.random.default_rng(0)
    constants = [Constant(rng.standard_normal(5).astype(np.float32)), Constant(np.arange(3, dtype=np.int64)),
                 Constant(np.zeros(0, np.float32)), Constant(rng.standard_normal((7, 9)).astype(np.float32)),
                 Constant(np.arange(4.0), "float32")]
    pack = WeightPack.build(constants, {"w__panels": rng.standard_normal((2, 17)).astype(np.float32)})
    assert pack.dtypes == ["float32", "int64"]
    for dtype in pack.dtypes:
        streamed, saved = tmp_path / f"streamed_{dtype}.npy", tmp_path / f"saved_{dtype}.npy"
        digest = compiler.cache.write_digested(streamed, functools.partial(pack.write_npy, dtype))
        np.save(saved, pack.arrays[dtype])
        assert streamed.read_bytes() == saved.read_bytes()
        assert digest == compiler.cache.file_digest(streamed)
    packed = pack.arrays["float32"]
    np.testing.assert_array_equal(packed[pack.slots[constants[3]][1]:][:63], constants[3].data.reshape(-1))
    np.testing.assert_array_equal(packed[pack.slots[constants[4]][1]:][:4], [0, 1, 2, 3])


def test_bin_digest_is_memoised_until_the_file_changes(model, tmp_path, monkeypatch):
    monkeypatch.setattr(compiler.cache, "BIG_FILE", 1)
    monkeypatch.setattr(compiler.cache, "RACY_SECONDS", -1.0)  # the test's files are seconds old at most
    cache = tmp_path / "cache"
    bin_path = tmp_path / "m.pnnx.bin"
    base = compiler.compile(model, cache_dir=cache).cache_info.key
    memo = json.loads((cache / "digests.json").read_text())
    assert memo[str(bin_path.resolve())][-1] == compiler.cache.file_digest(bin_path)

    digested = _digested(monkeypatch)
    assert compiler.compile(model, cache_dir=cache).cache_info.key == base
    assert bin_path.name not in digested

    size = bin_path.stat().st_size
    with zipfile.ZipFile(bin_path, "w") as z:  # rewritten in place: same inode and size
        z.writestr("scale.data", (SCALE * 2).tobytes())
    assert bin_path.stat().st_size == size
    m = compiler.compile(model, cache_dir=cache)
    assert m.cache_info.key != base and bin_path.name in digested
    np.testing.assert_allclose(m(X), 2 * EXPECTED, rtol=1e-6)


def test_a_just_written_bin_is_not_memoised(model, tmp_path, monkeypatch):
    monkeypatch.setattr(compiler.cache, "BIG_FILE", 1)
    cache = tmp_path / "cache"
    compiler.compile(model, cache_dir=cache)
    memo_path = cache / "digests.json"
    assert not memo_path.exists() or str((tmp_path / "m.pnnx.bin").resolve()) not in json.loads(memo_path.read_text())


def test_cache_writable_by_others_is_not_used(model, tmp_path, caplog):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    with caplog.at_level(logging.WARNING):
        m = compiler.compile(model, cache_dir=cache)
    assert not m.cache_info.hit and "writable by other users" in m.cache_info.reason
    assert not (cache / "models").exists()
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)


def test_cache_can_be_disabled(model, tmp_path):
    m = compiler.compile(model, cache=False, cache_dir=tmp_path / "cache")
    assert not m.cache_info.hit and m.cache_info.reason == "cache=False"
    assert not (tmp_path / "cache").exists()
    np.testing.assert_allclose(m(X), EXPECTED, rtol=1e-6)


def test_one_model_in_two_cache_directories_of_one_process_runs_from_each(tmp_path):
    # modules import once per process, and numba caches a function beside its file: each entry
    # must run its own files, or the second entry never gets its machine code cached
    first = compiler.compile(SHIPPED, cache_dir=tmp_path / "a")
    second = compiler.compile(SHIPPED, cache_dir=tmp_path / "b")
    assert first.cache_info.key == second.cache_info.key
    for m in (first, second):
        assert Path(m._module.__file__).parent == Path(m.cache_info.path)
    assert list((Path(second.cache_info.path) / "__pycache__").glob("forward.forward-*.nbi"))


# -- the kernel library's numba cache -------------------------------------------------------------------


def _edit(path: Path) -> None:
    path.write_text(path.read_text() + "\n# edited\n")


def test_the_kernel_digest_reads_exactly_codegen_kernels_py(monkeypatch):
    from codegen import kernels

    here = ROOT / "codegen" / "kernels"
    read = []
    original = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self) or original(self))
    kernels.kernel_digest()
    assert sorted(read) == sorted(here.glob("*.py")) == kernels.kernel_sources()
    assert (here / "pool.py") in read and not any(p.is_relative_to(ROOT / "codegen" / "emit") for p in read)


def test_kernel_caches_are_dropped_when_a_kernel_changes_not_an_emit_rule(tmp_path):
    from codegen import kernels

    src = tmp_path / "codegen"
    shutil.copytree(ROOT / "codegen", src, ignore=shutil.ignore_patterns("__pycache__"))
    library, cache = src / "kernels", src / "kernels" / "__pycache__"
    cache.mkdir()

    def cached_kernel() -> Path:
        path = cache / "pool.pool2d-1.py311.nbi"
        path.write_bytes(b"index")
        return path

    assert kernels._drop_stale_numba_caches(library)  # no stamp yet: start over
    stale = cached_kernel()
    assert not kernels._drop_stale_numba_caches(library) and stale.exists()
    for rule in [*(src / "emit").glob("*.py"), src / "emitter.py"]:
        _edit(rule)
    assert not kernels._drop_stale_numba_caches(library) and stale.exists()
    _edit(library / "vmath.py")
    assert kernels._drop_stale_numba_caches(library) and not stale.exists()
    stale = cached_kernel()
    assert kernels._drop_stale_numba_caches(library, extra=b"generated kernel source")  # the hook for more
    assert not stale.exists()
    assert not kernels._drop_stale_numba_caches(library, extra=b"generated kernel source")


def test_kernel_caches_under_numba_cache_dir_are_dropped_too(tmp_path, monkeypatch):
    """With NUMBA_CACHE_DIR set numba caches the kernels in a folder of its own: a change of one kernel
    source drops the cached code there too (depthwise.py's kernels inline depthwise_rows.py's code and kept
    the old one after an edit of that file alone), and each folder keeps its own stamp, so a folder
    last used at an older source starts over even when __pycache__'s stamp is current."""
    from numba.core import caching, config

    from codegen import kernels

    src = tmp_path / "codegen"
    shutil.copytree(ROOT / "codegen", src, ignore=shutil.ignore_patterns("__pycache__"))
    library = src / "kernels"
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba_cache"))
    user = Path(config.CACHE_DIR) / caching.UserProvidedCacheLocator.get_suitable_cache_subpath(
        str(library / "depthwise.py"))  # where numba caches that file's kernels

    def cached_kernel() -> Path:
        path = user / "depthwise.conv_depthwise-1.py311.nbi"
        path.write_bytes(b"index")
        return path

    assert kernels._drop_stale_numba_caches(library)  # no stamps yet
    stale = cached_kernel()
    assert not kernels._drop_stale_numba_caches(library) and stale.exists()
    _edit(library / "depthwise_rows.py")
    assert kernels._drop_stale_numba_caches(library) and not stale.exists()
    stale = cached_kernel()
    (user / kernels.STAMP).write_text("the digest of an older source")
    assert kernels._drop_stale_numba_caches(library) and not stale.exists()
    assert (library / "__pycache__" / kernels.STAMP).read_text() == (user / kernels.STAMP).read_text()


# -- what the key covers ------------------------------------------------------------------------------


@pytest.fixture
def source_copy(tmp_path, monkeypatch) -> Path:
    """A copy of the packages the key hashes, which the key then reads instead of ours."""
    root = tmp_path / "src"
    for package in compiler.cache.CODE_PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "data"))
    monkeypatch.setattr(compiler.cache, "SOURCE_ROOT", root)
    yield root
    compiler.cache.code_digest.cache_clear()


def _key(model: Path) -> str:
    compiler.cache.code_digest.cache_clear()  # memoised per process: our sources do not change under us
    return compiler.cache.cache_key(model, None, {"fuse": True})


@pytest.mark.parametrize("edited", ["compiler/cli.py", "compiler/__main__.py", "compiler/interpreter.py",
                                    "compiler/model.py", "compiler/cache.py", "codegen/runtime.py"])
def test_key_ignores_code_that_does_not_generate_code(model, source_copy, edited):
    base = _key(model)
    _edit(source_copy / edited)
    assert _key(model) == base


@pytest.mark.parametrize("edited", [
    "compiler/passes/schedule.py", "compiler/passes/__init__.py", "codegen/emit/pool.py", "codegen/emit/__init__.py",
    "codegen/kernels/pool.py", "codegen/emitter.py", "codegen/linker.py", "codegen/memory_plan.py",
    "compiler/lowering/conv.py", "compiler/pnnx_format.py", "compiler/api.py", "compiler/numba_backend.py",
    "ir/ops/conv.py", "ir/printer.py", "compiler/passes/a_new_pass.py",
])
def test_key_covers_code_that_generates_code(model, source_copy, edited):
    base = _key(model)
    path = source_copy / edited
    if path.exists():
        _edit(path)
    else:
        path.write_text("# a module added later is keyed without being listed\n")
    assert _key(model) != base


def test_the_keys_exclusions_name_existing_modules_and_nothing_else_is_left_out():
    sources = compiler.cache.code_sources(ROOT)
    names = {p.relative_to(ROOT).as_posix() for p in sources}
    every = {p.relative_to(ROOT).as_posix() for package in compiler.cache.CODE_PACKAGES
             for p in (ROOT / package).rglob("*.py")}
    assert set(compiler.cache.NOT_CODE) <= every  # a renamed module must not linger here
    assert names == every - set(compiler.cache.NOT_CODE)
    assert {"compiler/cli.py", "compiler/__main__.py", "compiler/interpreter.py"}.isdisjoint(names)


CPU_SCRIPT = """
import json, llvmlite.binding as llvm, compiler.cache
print(json.dumps({"cpu": compiler.cache._cpu_signature(), "host": llvm.get_host_cpu_name()}))
"""


def _cpu_signature_in_subprocess(**numba_env: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_") and k != "PNNX_JIT_VECTOR_WIDTH"}
    env.update(PYTHONPATH=str(ROOT), **numba_env)
    out = subprocess.run([sys.executable, "-c", CPU_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_key_uses_the_cpu_numba_compiles_for_not_the_host():
    host = _cpu_signature_in_subprocess()
    haswell = _cpu_signature_in_subprocess(NUMBA_CPU_NAME="haswell")
    pinned = _cpu_signature_in_subprocess(NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="+avx,+avx2,+fma")
    assert f"|{host['host']}|" in host["cpu"]
    assert "|haswell|" in haswell["cpu"] and "|haswell|+avx,+avx2,+fma" in pinned["cpu"]
    assert pinned["cpu"] != haswell["cpu"]  # features count, not only the name
    if host["host"] != "haswell":
        assert haswell["cpu"] != host["cpu"]
    # a forced vector width changes the generated code (blocks, panels): a key of its own, the CPU's kept
    forced = _cpu_signature_in_subprocess(PNNX_JIT_VECTOR_WIDTH="16")
    assert forced["cpu"] == host["cpu"] + "|vector=16"


ORDER_SCRIPT = """
import json, sys
if sys.argv[1] == "codegen first":
    import codegen.runtime
import compiler.cache
print(json.dumps({"cpu": compiler.cache._cpu_signature()}))
"""


def test_the_key_does_not_depend_on_what_the_process_imported_first():
    """A process whose first compile() computes the key before anything imported codegen gets the
    same CPU signature (numba's target features, 512-bit vectors on AVX-512 hosts included) as one
    that imported codegen first: a fresh process must hit the entry that another one wrote."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    seen = []
    for order in ("compiler first", "codegen first"):
        out = subprocess.run([sys.executable, "-c", ORDER_SCRIPT, order], env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        seen.append(json.loads(out.stdout.strip().splitlines()[-1])["cpu"])
    assert seen[0] == seen[1]
