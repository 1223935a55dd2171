"""codegen/runtime.py's process settings: the OpenMP workers' spin, and the user's choice kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _spin_setting(**env: str) -> str:
    """GOMP_SPINCOUNT as a fresh process sees it after importing codegen.runtime, with `env` set."""
    clean = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    code = "import os, codegen.runtime; print(os.environ.get('GOMP_SPINCOUNT', 'unset'))"
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_idle_workers_spin_briefly_by_default():
    from codegen.runtime import SPIN_COUNT
    assert _spin_setting() == str(SPIN_COUNT)


@pytest.mark.parametrize("env, expected", [({"GOMP_SPINCOUNT": "7"}, "7"), ({"OMP_WAIT_POLICY": "PASSIVE"}, "unset")])
def test_a_users_openmp_setting_is_kept(env, expected):
    assert _spin_setting(**env) == expected


# scipy's BLAS (numba's np.dot calls it) as a fresh process sees it: whether importing codegen.runtime imported
# scipy.linalg, then, after scipy.linalg.cython_blas and an np.dot in jitted code, each of scipy's BLAS
# libraries' threads and the product's error
BLAS_STATE = '''
import json, sys
if sys.argv[1] == "scipy first":
    import scipy.linalg
import numpy as np
import codegen.runtime
imported = "scipy.linalg" in sys.modules
from codegen.kernels.common import gemm
a, b = np.random.default_rng(0).normal(size=(2, 64, 64))
out = np.empty((64, 64))
gemm(a, b, out)
import scipy.linalg.cython_blas, threadpoolctl
scipy_dir = scipy.linalg.cython_blas.__file__.rsplit("/", 2)[0]
threads = [lib["num_threads"] for lib in threadpoolctl.threadpool_info()
           if lib["user_api"] == "blas" and lib["filepath"].startswith(scipy_dir)]
print(json.dumps([imported, threads, float(np.abs(out - a @ b).max())]))
'''


def _blas_state(order: str) -> list:
    done = subprocess.run([sys.executable, "-c", BLAS_STATE, order], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_scipys_blas_runs_one_thread_without_codegen_importing_scipy_linalg():
    from codegen.runtime import scipy_blas_library
    imported, threads, error = _blas_state("codegen first")
    if scipy_blas_library() is not None:  # a wheel's bundled OpenBLAS: loaded alone, scipy.linalg left for later
        assert imported is False
    assert threads == [1] and error < 1e-12  # the library np.dot called, shared with scipy's import


def test_scipys_blas_runs_one_thread_when_scipy_linalg_was_imported_first():
    imported, threads, error = _blas_state("scipy first")
    assert imported is True and threads == [1] and error < 1e-12
