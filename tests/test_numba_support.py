"""The numba versions we support."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from codegen import numba_support
from codegen.numba_support import UnsupportedNumbaError, check_versions

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter at the repo root."""
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


# -- the supported numba and llvmlite releases ---------------------------------------------------------


def test_the_installed_versions_are_supported():
    numba_support.check_installed()


@pytest.mark.parametrize("versions", [
    {"numba": "0.68.0", "llvmlite": "0.50.0"},
    {"numba": "0.68.9", "llvmlite": "0.50.3"},
    {"numba": "0.68.0dev0+12.gabcdef"},
])
def test_versions_in_the_range_pass(versions):
    check_versions(versions)


@pytest.mark.parametrize("versions, named", [
    ({"numba": "0.67.1", "llvmlite": "0.50.0"}, "numba 0.67.1 is installed"),
    ({"numba": "0.69.0", "llvmlite": "0.50.0"}, "numba 0.69.0 is installed"),
    ({"numba": "0.69.0rc1", "llvmlite": "0.50.0"}, "numba 0.69.0rc1 is installed"),
    ({"numba": "1.0", "llvmlite": "0.50.0"}, "numba 1.0 is installed"),
    ({"numba": "0.68.1", "llvmlite": "0.51.0"}, "llvmlite 0.51.0 is installed"),
    ({"numba": "0.59.0", "llvmlite": "0.42.0"}, "numba 0.59.0 and llvmlite 0.42.0 are installed"),
    ({"numba": "unknown", "llvmlite": "0.50.0"}, "numba unknown is installed"),
])
def test_versions_outside_the_range_fail_naming_both_and_the_fix(versions, named):
    with pytest.raises(UnsupportedNumbaError) as raised:
        check_versions(versions)
    message = str(raised.value)
    assert named in message
    assert "supports numba>=0.68,<0.69 and llvmlite>=0.50,<0.51" in message
    assert message.endswith('Fix: pip install "numba>=0.68,<0.69" "llvmlite>=0.50,<0.51"')


def test_pyproject_pins_the_supported_range():
    text = (ROOT / "pyproject.toml").read_text()
    for package in numba_support.SUPPORTED:
        assert f'"{numba_support.requirement(package)}"' in text, package


def test_importing_codegen_with_another_numba_fails_clearly():
    done = run_python(
        "import numba\n"
        "numba.__version__ = '0.70.0'\n"
        "try:\n"
        "    import codegen\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "import sys\n"
        "print('numba_cache imported:', 'codegen.numba_cache' in sys.modules)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "UnsupportedNumbaError pnnx-jit supports numba>=0.68,<0.69" in done.stdout
    assert "numba 0.70.0 is installed" in done.stdout
    assert "numba_cache imported: False" in done.stdout  # numba's cache is not patched
