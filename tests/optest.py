"""Check one torch module against our compiled model, through pnnx.

    check_module(MyModule(), torch.randn(2, 3, 9, 11))

exports the module with pnnx (cached for the session by the module's code,
weights and input shapes), compiles it with each backend, runs it on the same
inputs and compares every output with torch eager. Several parameter
combinations can share one module (and one export) by returning a tuple.
"""

from __future__ import annotations

import atexit
import hashlib
import inspect
import io
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

import compiler
from bench.pnnx_export import export_pnnx

BACKENDS = ("interpreter", "numba")
_EXPORTS: dict[str, Path] = {}
_EXPORT_DIR = Path(tempfile.mkdtemp(prefix="optest_pnnx_"))
atexit.register(shutil.rmtree, _EXPORT_DIR, ignore_errors=True)  # this process's exports, not left in the temp dir


def _module_key(module: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for cls in type(module).__mro__:
        if cls.__module__.startswith("torch"):
            break
        h.update(inspect.getsource(cls).encode())
    h.update(repr(module).encode())
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    h.update(buf.getvalue())
    for t in inputs:
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
    return h.hexdigest()[:24]


def export(module: torch.nn.Module, *inputs: torch.Tensor, other_sizes: Sequence[torch.Tensor] | None = None) -> Path:
    """pnnx-export `module` (eval mode) once per session; return the .pnnx.param path. other_sizes: the
    inputs at other sizes, which makes pnnx mark the dims that differ dynamic ('?')."""
    module = module.eval()
    key = _module_key(module, [*inputs, *(other_sizes or ())]) + ("_dynamic" if other_sizes else "")
    if key not in _EXPORTS:
        _EXPORTS[key] = export_pnnx(module, tuple(inputs), _EXPORT_DIR / key, "m",
                                    tuple(other_sizes) if other_sizes else None)
    return _EXPORTS[key]


def torch_outputs(module: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> list[np.ndarray]:
    with torch.no_grad():
        out = module.eval()(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().numpy() for o in outs]


def check_module(
    module: torch.nn.Module,
    *inputs: torch.Tensor,
    rtol: float = 1e-4,
    atol: float = 1e-4,
    backends: Sequence[str] = BACKENDS,
    labels: Sequence[str] | None = None,
) -> Path:
    """Assert every backend matches torch eager on `inputs`; return the .pnnx.param path.

    labels name the module's outputs in failure messages (one per output).
    """
    param = export(module, *inputs)
    expected = torch_outputs(module, inputs)
    arrays = [t.numpy() for t in inputs]
    for backend in backends:
        model = compiler.compile(param, backend=backend)
        got = model(*arrays)
        got = list(got) if isinstance(got, tuple) else [got]
        assert len(got) == len(expected), f"{backend}: {len(got)} outputs, torch gives {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            label = labels[i] if labels else f"output {i}"
            assert g.shape == e.shape, f"{backend} {label}: shape {g.shape}, torch {e.shape}"
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"{backend} {label}")
    return param


def randomize_norms(module: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial running statistics and affine parameters (defaults are 0/1, which hide mistakes)."""
    with torch.no_grad():
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if name.endswith("running_var"):
                tensor.copy_(torch.rand_like(tensor) * 2 + 0.1)
            elif tensor.is_floating_point():
                tensor.copy_(torch.randn_like(tensor))
    return module
