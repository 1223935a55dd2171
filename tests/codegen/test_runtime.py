"""codegen/runtime.py's process settings: the OpenMP workers' spin, and the user's choice kept."""

from __future__ import annotations

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
