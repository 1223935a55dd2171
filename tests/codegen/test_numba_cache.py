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
