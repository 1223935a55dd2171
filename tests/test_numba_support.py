"""The numba versions we support, and the baseline-CPU environment of .ci/run's second run."""

from __future__ import annotations

import json
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


# -- .ci/run's second run: numba, torch and OpenBLAS on a baseline AVX2 CPU ---------------------------------


def ci_array(name: str, **env: str) -> list[str]:
    """The bash array `name` (AVX2_ENV, AVX2_TESTS) that .ci/run's second run uses, as bash expands it."""
    script = (f'source <(sed -n "/^AVX2_ENV=(/,/^fi$/p" {ROOT / ".ci" / "run"}); '
              f'printf "%s\\0" "${{{name}[@]}}"')
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                          env={**os.environ, **env})
    return [item for item in done.stdout.split("\0") if item]


def ci_avx2_env() -> dict[str, str]:
    return dict(item.split("=", 1) for item in ci_array("AVX2_ENV"))


PROBE = r"""
import json, re, warnings
with warnings.catch_warnings(record=True) as numpy_warnings:
    warnings.simplefilter("always")
    import numpy
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
import llvmlite.binding as llvm
import numba
import threadpoolctl
import torch
from numba.core import codegen
from numba.core.registry import cpu_target

@numba.njit("void(float32, float32[::1], float32[::1])")  # compiled, never run: the code might not run here
def axpy(a, x, y):
    for i in range(x.size):
        y[i] += a * x[i]

asm = next(iter(axpy.inspect_asm().values()))
target = cpu_target.target_context.codegen()
print(json.dumps({
    "codegen": type(target).__name__,
    "is_jit": isinstance(target, codegen.JITCPUCodegen),
    "magic": target.magic_tuple(),  # what numba's cache keys an entry on: triple, CPU name, features
    "host_cpu": llvm.get_host_cpu_name(),
    "host_features": llvm.get_host_cpu_features().flatten(),
    "zmm": len(re.findall(r"%zmm\d", asm)),
    "ymm": len(re.findall(r"%ymm\d", asm)),
    "torch": torch.backends.cpu.get_cpu_capability(),
    "openblas": [lib.get("architecture") for lib in threadpoolctl.threadpool_info()
                 if lib["internal_api"] == "openblas"],
    # the dispatch targets numpy would run (its individual AVX512F ... flags stay detected when disabled)
    "numpy_avx512": sorted(t for t in __cpu_dispatch__ if __cpu_features__.get(t) and ("512" in t or t == "X86_V4")),
    "numpy_warnings": [str(w.message) for w in numpy_warnings if "NPY_" in str(w.message)],
}))
"""


def test_ci_avx2_run_targets_haswell():
    env = ci_avx2_env()
    assert env["NUMBA_CPU_NAME"] == "haswell"
    done = run_python(PROBE, env)
    assert done.returncode == 0, done.stderr
    assert "not a recognized feature" not in done.stderr  # LLVM ignores a misspelt feature, with a warning
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    assert seen["codegen"] == "JITCPUCodegen" and seen["is_jit"]
    _, cpu, features = seen["magic"]
    assert cpu == "haswell"
    assert features == env["NUMBA_CPU_FEATURES"]
    assert "+avx2" in features.split(",") and not any(f.startswith("+avx512") for f in features.split(","))
    if "+avx512f" in seen["host_features"].split(","):
        # numba's cache (and compiled models) keep AVX-512 code apart from the AVX2 code of this run
        assert features != seen["host_features"]
    assert seen["ymm"] > 0, "the loop is not vectorised with AVX: the zmm check below proves nothing"
    assert seen["zmm"] == 0, "AVX-512 registers in code compiled for haswell"

    assert seen["torch"] == "AVX2"
    assert seen["openblas"] and all(arch.lower() == "haswell" for arch in seen["openblas"]), seen["openblas"]
    assert seen["numpy_warnings"] == []  # numpy knows every feature NPY_DISABLE_CPU_FEATURES names
    assert seen["numpy_avx512"] == []


@pytest.mark.parametrize("everything", ["0", "1"])
def test_ci_avx2_run_collects_its_tests(everything):
    tests = ci_array("AVX2_TESTS", CI_AVX2_ALL=everything)
    assert any(t.startswith("tests/test_zoo.py") for t in tests)
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", *tests], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]  # 4: a test id names no test
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert len(collected) >= len(tests)
