"""Shared pytest setup: deterministic torch, and a cache directory for compiled models."""

import os
import tempfile
from pathlib import Path

import torch

# compiled test models go to a temp cache (kept between runs on one machine: faster reruns)
os.environ.setdefault("PNNX_JIT_CACHE_DIR", str(Path(tempfile.gettempdir()) / "pnnx_jit_test_cache"))

# kernels compile in this process: pytest-xdist already runs a worker per core (a worker of
# codegen/compile_workers.py per test process would only compete with them); the parallel
# compile has its own tests (tests/codegen/test_compile_workers.py)
os.environ.setdefault("PNNX_JIT_COMPILE_PROCESSES", "1")

torch.manual_seed(0)
torch.set_num_threads(2)

# numba's target features (512-bit vectors on AVX-512 hosts, codegen/runtime.py) are fixed when the
# process first builds numba's target: set them now, before any test jit-compiles a function of its
# own, so that this process compiles (and keys its cache entries) as a fresh `compile()` process does
import codegen.runtime  # noqa: E402, F401


def pytest_report_header(config):
    """The CPU that numba compiles for and torch's kernel ISA: .ci/run's second run emulates a baseline CPU."""
    import llvmlite.binding as llvm
    from numba.core import config as numba_config

    cpu = numba_config.CPU_NAME or llvm.get_host_cpu_name()  # as numba.core.codegen.JITCPUCodegen chooses
    features = "NUMBA_CPU_FEATURES" if numba_config.CPU_FEATURES is not None else "the host's"
    return f"numba target: {cpu} with {features} features; torch: {torch.backends.cpu.get_cpu_capability()}"
