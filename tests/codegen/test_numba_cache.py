"""codegen/numba_cache.py: numba's cache saves hold a lock, so concurrent compiles keep every entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import filelock
import pytest
from numba.core import caching

import codegen  # noqa: F401 - installs the lock

ROOT = Path(__file__).resolve().parents[2]

KERNEL = '''
import numba


@numba.njit(cache=True)
def twice(x):
    return x * 2
'''

# each process compiles (and saves) one signature of the same cached function
COMPILE_ONE = '''
import json, sys
import numpy as np
import codegen  # the lock
sys.path.insert(0, sys.argv[1])
import kernel_mod
value = {"int": 3, "float": 1.5, "array": np.arange(3.0), "complex": 1j}[sys.argv[2]]
print(json.dumps(str(kernel_mod.twice(value))))
'''


def test_a_save_holds_the_index_lock(tmp_path, monkeypatch):
    seen = []

    def check_locked(self, overloads):
        with pytest.raises(filelock.Timeout):  # another holder of the index's lock must wait
            filelock.FileLock(f"{self._index_path}.lock", timeout=0).acquire()
        seen.append(self._index_path)

    monkeypatch.setattr(caching.IndexDataCacheFile, "_save_index", check_locked)
    monkeypatch.setattr(caching.IndexDataCacheFile, "_save_data", lambda self, name, data: None)
    cache_file = caching.IndexDataCacheFile(str(tmp_path), "f-1.py311", ("stamp", 0))
    cache_file.save(("key",), b"data")
    assert seen == [str(tmp_path / "f-1.py311.nbi")]


def test_concurrent_processes_saving_signatures_of_one_function_keep_every_entry(tmp_path):
    (tmp_path / "kernel_mod.py").write_text(KERNEL)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    kinds = ["int", "float", "array", "complex"]
    procs = [subprocess.Popen([sys.executable, "-c", COMPILE_ONE, str(tmp_path), kind], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for kind in kinds]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]
    # a fresh process loads every signature from the cache (none compiled again) and gets right answers
    misses = "len(kernel_mod.twice.stats.cache_misses)"
    check = COMPILE_ONE.replace("print(json.dumps(str(kernel_mod.twice(value))))",
                                f"print(json.dumps([str(kernel_mod.twice(value)), {misses}]))")
    for kind, (out, _) in zip(kinds, outputs):
        result = subprocess.run([sys.executable, "-c", check, str(tmp_path), kind], env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        value, misses = json.loads(result.stdout.strip().splitlines()[-1])
        assert value == json.loads(out.strip().splitlines()[-1])
        assert misses == 0, f"{kind}: compiled again, its cache entry was lost"


# the digest numba's cache keys a closure's entries on (numba.core.caching, _CacheImpl's index key), for each
# public jitted function of the kernel library that has a closure
CLOSURE_DIGESTS = '''
import hashlib, importlib, json, pkgutil
from numba.core.registry import CPUDispatcher
from numba.core.serialize import dumps
import codegen.kernels as library
digests = {}
for info in pkgutil.iter_modules(library.__path__):
    module = importlib.import_module(f"codegen.kernels.{info.name}")
    for name, obj in sorted(vars(module).items()):
        if not name.startswith("_") and isinstance(obj, CPUDispatcher) and obj.py_func.__closure__ is not None:
            cells = tuple(cell.cell_contents for cell in obj.py_func.__closure__)
            digests[f"{info.name}.{name}"] = hashlib.sha256(dumps(cells)).hexdigest()
print(json.dumps(digests))
'''


def test_the_kernels_made_by_factories_have_the_same_cache_key_in_every_process():
    """numba keys a closure's cache entries on a pickle of its cells, and a jitted function pickles with an
    id of its own process: conv2d_packed, made by a factory, once held its task function in its closure,
    missed numba's cache in every fresh process and compiled again (about 20 s). Each public kernel of
    codegen.kernels with a closure (conv2d_packed, conv1x1_packed, conv1x1_packed_prologue among them)
    keys its cache entries the same in two processes."""
    runs = [subprocess.run([sys.executable, "-c", CLOSURE_DIGESTS], capture_output=True, text=True, timeout=300,
                           cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT))) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-3000:]
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert {"conv_packed.conv2d_packed", "conv_packed.conv1x1_packed", "conv_packed.conv1x1_packed_prologue"} <= set(
        first)
    assert first == second


# a fresh process: load_cached() of a signature an earlier process saved, of one never saved, of a function
# without cache=True; then a compile, which must refresh numba's registries itself
LOAD_CACHED = '''
import json, sys
import numba
import numpy as np
from numba.core import types
from numba.core.base import BaseContext
from codegen.numba_cache import load_cached
refreshes = []
_refresh = BaseContext.refresh
BaseContext.refresh = lambda self: (refreshes.append(1), _refresh(self))[1]
sys.path.insert(0, sys.argv[1])
import kernel_mod
loaded = load_cached(kernel_mod.twice, (types.float64,))
after_load = len(refreshes)
value = kernel_mod.twice(1.5)
missing = load_cached(kernel_mod.twice, (types.int32,))
uncached = load_cached(numba.njit(lambda x: x + 1), (types.float64,))
total = numba.njit(lambda a: np.sum(np.sort(a)))(np.arange(4.0))  # needs the registries load_cached skipped
print(json.dumps([loaded, after_load, value, missing, uncached, total, len(kernel_mod.twice.stats.cache_misses)]))
'''


def test_load_cached_loads_machine_code_without_refreshing_numbas_registries(tmp_path):
    (tmp_path / "kernel_mod.py").write_text(KERNEL)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    saved = subprocess.run([sys.executable, "-c", COMPILE_ONE, str(tmp_path), "float"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert saved.returncode == 0, saved.stderr
    done = subprocess.run([sys.executable, "-c", LOAD_CACHED, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded, after_load, value, missing, uncached, total, misses = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded is True and after_load == 0 and value == 3.0 and misses == 0
    assert missing is False and uncached is False  # not in the cache: the caller compiles
    assert total == 6.0
