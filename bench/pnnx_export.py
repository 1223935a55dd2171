"""Convert torch modules to ``.pnnx.param`` / ``.pnnx.bin`` with pnnx, cached.

    from bench.pnnx_export import export_pnnx, export_zoo
    param = export_zoo("resnet18")                  # cached; .pnnx.bin beside it
    param = export_pnnx(module, x, out_dir, "net")  # one-off, no cache

pnnx traces the module, then runs its C++ converter, which prints a lot and
writes many files (TorchScript, ncnn, onnx, python). Only the ``.pnnx.param`` and
``.pnnx.bin`` are kept; the converter's output is captured at the file-descriptor
level and shown only when the export fails.

The zoo cache lives in ``$PNNX_ZOO_CACHE`` (default: ``<tmp>/pnnx_zoo_cache``),
one directory per (model, batch, hash of bench/zoo.py, torch version, pnnx
version). A file lock serialises concurrent exports of the same model, and each
export is written to a temporary directory that is renamed into place, so a
reader never sees half-written files.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from bench import zoo

_CWD_LOCK = threading.Lock()  # export changes the process cwd and fds 1/2
_TAIL_CHARS = 4000


@contextlib.contextmanager
def _captured_fds(out: list[str]) -> Iterator[None]:
    """Redirect fds 1 and 2 (C++ writes there too) to a temp file; append the
    captured text to ``out`` when the block exits."""
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", errors="replace"))


@contextlib.contextmanager
def _chdir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _as_tensors(example_input) -> tuple[torch.Tensor, ...]:
    items = example_input if isinstance(example_input, (tuple, list)) else (example_input,)
    return tuple(
        t if isinstance(t, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(t))
        for t in items
    )


_PNNX_TYPES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.int64: "i64",
               torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool"}


def _pnnx_type(t: torch.Tensor) -> str:
    """The converter's name of an input's dtype (its inputshape= suffix)."""
    try:
        return _PNNX_TYPES[t.dtype]
    except KeyError:
        raise ValueError(f"pnnx takes no {t.dtype} input") from None


def _shapes_argument(inputs: tuple[torch.Tensor, ...]) -> str:
    """The converter's inputshape= value: [1,3,224,224]f32,[1,16]i64"""
    return ",".join(f"[{','.join(map(str, t.shape))}]{_pnnx_type(t)}" for t in inputs)


_DISCARDED_OUTPUTS = ("pnnxpy", "pnnxonnx", "ncnnparam", "ncnnbin", "ncnnpy")


def export_pnnx(module: torch.nn.Module, example_input, out_dir, name: str, example_input2=None) -> Path:
    """Export ``module`` with pnnx; return ``out_dir/<name>.pnnx.param``.

    ``example_input`` is a numpy array (or torch tensor) or a tuple of them, one per
    model input. ``example_input2``, the same inputs at other sizes, makes pnnx mark the
    dims that differ dynamic ('?'). Every other file pnnx writes is deleted. Raises
    RuntimeError with the tail of pnnx's output if the conversion fails.
    """
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    param = out_dir / f"{name}.pnnx.param"
    binf = out_dir / f"{name}.pnnx.bin"
    inputs = _as_tensors(example_input)
    inputs_arg = inputs[0] if len(inputs) == 1 else inputs

    import pnnx  # imported lazily: slow, and only needed to export

    module = module.eval()
    error: BaseException | None = None
    log: list[str] = []
    with _CWD_LOCK:
        before = set(os.listdir(out_dir))
        for f in (param, binf):  # never report stale files as a fresh export
            f.unlink(missing_ok=True)
        pyfile = out_dir / f"{name.replace('-', '_')}_pnnx.py"
        try:
            with _captured_fds(log), _chdir(out_dir), torch.no_grad(), \
                    warnings.catch_warnings():
                warnings.simplefilter("ignore")  # jit.trace deprecation, TracerWarning
                try:
                    # what pnnx.export does, but its wrapper names a bool input f32 on the converter's
                    # command line, and then imports the Python it generated, which fails for a
                    # graph that keeps an aten:: op (and builds a torch model we do not need)
                    pt = out_dir / f"{name}.pt"
                    # check_trace=False: the check runs the traced and the eager module again
                    # (5-8 s for YOLOv5s at batch 4, several times the trace itself), and it only
                    # compares them; the converted model is compared with torch wherever it matters
                    torch.jit.trace(module, inputs_arg, check_trace=False).save(str(pt))
                    # only the pnnx files are kept: the converter's other outputs (its ONNX, ncnn and Python
                    # files, 600 MB for AlexNet) go to the null device, in float32 (no fp16 conversion)
                    arguments = [f"inputshape={_shapes_argument(inputs)}", "fp16=0",
                                 *(f"{key}={os.devnull}" for key in _DISCARDED_OUTPUTS)]
                    if example_input2 is not None:
                        arguments.append(f"inputshape2={_shapes_argument(_as_tensors(example_input2))}")
                    # not check=True: the converter may crash converting to ncnn, after the pnnx
                    # files are written (as pnnx.convert, we judge by the files)
                    subprocess.run([pnnx.EXEC_PATH, pt.name, *arguments], cwd=out_dir, check=False)
                except BaseException as e:  # noqa: BLE001 - re-raised below with the log
                    error = e
        finally:
            sys.modules.pop(str(pyfile.with_suffix("")), None)  # pnnx registers it
            keep = {param.name, binf.name}
            stem = name.replace("-", "_")
            pnnx_outputs = {
                f"{name}.pt", f"{name}.pnnx.onnx", f"{name}.ncnn.param",
                f"{name}.ncnn.bin", f"{stem}_pnnx.py", f"{stem}_ncnn.py",
            }
            for entry in os.listdir(out_dir):
                if entry in keep or (entry in before and entry not in pnnx_outputs):
                    continue
                p = out_dir / entry
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)

    if isinstance(error, KeyboardInterrupt):
        raise error
    if error is not None or not param.is_file() or not binf.is_file():
        what = f"{type(error).__name__}: {error}" if error else "no .pnnx.param/.pnnx.bin"
        tail = log[0][-_TAIL_CHARS:] if log else ""
        for f in (param, binf):  # don't leave a half-converted model behind
            f.unlink(missing_ok=True)
        raise RuntimeError(
            f"pnnx export of {name!r} failed ({what}).\n--- pnnx output (tail) ---\n{tail}"
        ) from error
    return param


# ----------------------------------------------------------------------------
# Zoo cache
# ----------------------------------------------------------------------------


def default_cache_dir() -> Path:
    env = os.environ.get("PNNX_ZOO_CACHE")
    return Path(env) if env else Path(tempfile.gettempdir()) / "pnnx_zoo_cache"


def _zoo_key(name: str, batch: int) -> str:
    src = Path(zoo.__file__).read_bytes()
    h = hashlib.sha256()
    for part in (
        name,
        str(batch),
        hashlib.sha256(src).hexdigest(),
        torch.__version__,
        importlib.metadata.version("pnnx"),
    ):
        h.update(part.encode() + b"\0")
    return f"{name}-b{batch}-{h.hexdigest()[:16]}"


def build_cache_dir(final: Path, files: list[Path], build: Callable[[Path], object]) -> None:
    """Make the cache directory `final`, holding `files`, with build(tmp): under a file lock, into a
    private temporary directory beside it that is renamed into place, so that a concurrent reader
    never sees half of it. Returns at once if another process made it meanwhile."""
    import filelock

    final.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(f"{final}.lock"):
        if all(f.is_file() for f in files):
            return  # another process finished it while we waited
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
        try:
            build(tmp)
            os.chmod(tmp, 0o755)  # mkdtemp makes it private
            if final.exists():  # incomplete leftover (e.g. a killed process)
                shutil.rmtree(final)
            os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)


def export_zoo(name: str, batch: int = 1, cache_dir=None) -> Path:
    """Export zoo model ``name`` at ``batch``; return its cached ``.pnnx.param``.

    A cache hit returns at once without importing pnnx or building the model.
    """
    entry = zoo.get(name)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = _zoo_key(name, batch)
    final = root / key
    param = final / f"{name}.pnnx.param"
    if param.is_file() and param.with_suffix(".bin").is_file():
        return param

    build_cache_dir(final, [param, param.with_suffix(".bin")],
                    lambda tmp: export_pnnx(entry.build(), zoo.make_input(entry, batch=batch), tmp, name))
    return param
