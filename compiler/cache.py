"""The ahead-of-time cache: compiled models that reload without recompiling.

An entry is a directory named by the key, holding everything a compiled model
needs besides the kernel library: the generated module (numba keeps its machine
code in __pycache__ beside it), the optimised IR, the packed weights (one .npy
per dtype, memory-mapped on load) and meta.json, which records the key's inputs,
the compile time and a checksum of every file. The key hashes the .param and
.bin bytes, our version, numba/llvmlite/numpy/Python versions, the CPU name and
features, and every option that changes the generated code.

Writes are atomic and locked: an entry is built in a temporary directory and
renamed into place under a file lock, so concurrent compiles of one model leave
one valid entry. An entry whose files fail their checksums is reported at debug
level and rebuilt; a cache in a directory other users can write to is not used.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import filelock
import platformdirs

log = logging.getLogger(__name__)

CACHE_ENV = "PNNX_JIT_CACHE_DIR"
FORMAT = 1  # bump when the entry layout changes


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("pnnx-jit"))


@dataclass
class CacheInfo:
    """What the cache did for one compile: `m.cache_info`."""

    hit: bool
    key: str
    path: Path | None
    compile_seconds: float  # time the entry took to build (when it was built)
    load_seconds: float  # time this process spent loading or building it
    reason: str = ""  # why the cache was not used, if it was not


def file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _cpu_signature() -> str:
    import llvmlite.binding as llvm

    return f"{llvm.get_host_cpu_name()}|{llvm.get_host_cpu_features().flatten()}"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A hash of our own source (ir/, compiler/, codegen/): any change to the code that generates a
    module must miss the cache, even before the version number moves."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.blake2b(digest_size=16)
    for package in ("ir", "compiler", "codegen"):
        for path in sorted((root / package).rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def cache_key(param: Path, bin_path: Path | None, options: dict) -> str:
    """The key of a compiled model: its bytes, every version that matters, the CPU, the options."""
    import llvmlite
    import numba
    import numpy

    import compiler

    material = {
        "format": FORMAT,
        "param": file_digest(param),
        "bin": file_digest(bin_path) if bin_path is not None and bin_path.exists() else None,
        "ours": compiler.__version__,
        "code": code_digest(),
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "numpy": numpy.__version__,
        "python": sys.version,
        "platform": platform.platform(),
        "cpu": _cpu_signature(),
        "options": options,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:32]


def untrusted_reason(path: Path) -> str | None:
    """Why `path` (a directory) must not be trusted: writable by others or owned by someone else."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"cannot stat {path}: {exc}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by other users"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} belongs to another user"
    return None


class ModelCache:
    """Entries under `root`, one directory per key."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()

    def entry_dir(self, key: str) -> Path:
        return self.root / "models" / key

    def usable(self) -> str | None:
        """None if the cache can be used, else the reason it cannot."""
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            if reason := untrusted_reason(self.root):
                return reason
            (self.root / "models").mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            return f"cannot create {self.root}: {exc}"
        return untrusted_reason(self.root / "models")

    def load(self, key: str) -> dict | None:
        """The entry's meta if it exists and every file checks out; a bad entry is removed."""
        path = self.entry_dir(key)
        meta_path = path / "meta.json"
        if not meta_path.exists():
            return None
        problem = untrusted_reason(path)
        if problem is None:
            try:
                meta = json.loads(meta_path.read_text())
                for name, digest in meta["files"].items():
                    if file_digest(path / name) != digest:
                        problem = f"{name} does not match its checksum"
                        break
            except (OSError, ValueError, KeyError) as exc:
                problem = f"unreadable entry: {exc}"
        if problem is None:
            return meta
        log.debug("cache entry %s is invalid (%s); rebuilding it", path, problem)
        shutil.rmtree(path, ignore_errors=True)
        return None

    def get_or_build(self, key: str, build: Callable[[Path], dict]) -> tuple[dict, bool]:
        """(meta, hit). On a miss, build(tmp_dir) writes the entry's files and returns its meta."""
        meta = self.load(key)
        if meta is not None:
            return meta, True
        lock = filelock.FileLock(str(self.root / "models" / f"{key}.lock"))
        with lock:
            meta = self.load(key)  # another process may have built it while we waited
            if meta is not None:
                return meta, True
            tmp = self.root / "models" / f".{key}.tmp{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(mode=0o700)
            try:
                start = time.perf_counter()
                meta = build(tmp)
                meta["build_seconds"] = time.perf_counter() - start
                meta["files"] = {p.name: file_digest(p) for p in sorted(tmp.iterdir()) if p.is_file()}
                (tmp / "meta.json").write_text(json.dumps(meta, indent=1))  # written last: marks completeness
                final = self.entry_dir(key)
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return meta, False

    def entries(self) -> list[tuple[str, dict | None, int]]:
        """(key, meta or None, size in bytes) of every entry."""
        out = []
        models = self.root / "models"
        if not models.is_dir():
            return out
        for path in sorted(p for p in models.iterdir() if p.is_dir() and not p.name.startswith(".")):
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            try:
                meta = json.loads((path / "meta.json").read_text())
            except (OSError, ValueError):
                meta = None
            out.append((path.name, meta, size))
        return out

    def clear(self) -> int:
        """Remove every entry; return how many there were."""
        n = len(self.entries())
        shutil.rmtree(self.root / "models", ignore_errors=True)
        return n
