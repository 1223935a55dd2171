"""Shared pytest setup: deterministic torch, and a cache directory for compiled models."""

import os
import tempfile
from pathlib import Path

import torch

# compiled test models go to a temp cache (kept between runs on one machine: faster reruns)
os.environ.setdefault("PNNX_JIT_CACHE_DIR", str(Path(tempfile.gettempdir()) / "pnnx_jit_test_cache"))

torch.manual_seed(0)
torch.set_num_threads(2)
