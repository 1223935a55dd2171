"""The kernel library: @njit(cache=True, nogil=True) functions shared by every model.

Only kernels live here (the rules that emit calls to them are in codegen/emit/), so the
numba cache files beside them are dropped only when a kernel's source changes: the digest
of kernel_sources() below, which is every codegen/kernels/*.py and nothing else.

Kernel source that does not live in those files must reach the digest too, or a change
of it leaves stale machine code cached in every kernel that inlines it: epilogue.py's
activate_run, say, generated from the op registry (ir/ops/), which conv and linear kernels
inline. Pass such source as `extra` in the _drop_stale_numba_caches() call at the bottom;
importing the module that generates it first is fine, as numba reads a kernel's cache at
its first call, not at import:

    from codegen.kernels.epilogue import ACTIVATIONS_SOURCE
    _drop_stale_numba_caches(extra=ACTIVATIONS_SOURCE.encode())"""

import hashlib
import os
from pathlib import Path

import codegen.runtime  # noqa: F401 - sets the OpenMP wait policy before any kernel runs

HERE = Path(__file__).parent
STAMP = "kernels.digest"  # in __pycache__: the digest the cache files there were compiled from


def kernel_sources(directory: Path = HERE) -> list[Path]:
    """The files whose change drops the kernels' numba caches: the *.py of `directory`, sorted
    (not its subdirectories, nor the emit rules in codegen/emit/)."""
    return sorted(directory.glob("*.py"))


def kernel_digest(directory: Path = HERE, extra: bytes = b"") -> str:
    """The digest of kernel_sources(directory), names and bytes, and of `extra`."""
    h = hashlib.blake2b(digest_size=16)
    for path in kernel_sources(directory):
        data = path.read_bytes()
        h.update(f"{path.name}\0{len(data)}\0".encode())  # a move between files changes the digest too
        h.update(data)
    h.update(f"extra\0{len(extra)}\0".encode())
    h.update(extra)
    return h.hexdigest()


def _numba_cache_dirs(directory: Path) -> list[Path]:
    """Where numba may keep the cache files of `directory`'s kernels: its __pycache__, and, when
    NUMBA_CACHE_DIR is set, the folder numba derives from it for this directory (which it then
    uses instead)."""
    dirs = [directory / "__pycache__"]
    from numba.core import caching, config  # noqa: PLC0415 - numba is imported by then (codegen.runtime)

    if config.CACHE_DIR:
        dirs.append(Path(config.CACHE_DIR) / caching.UserProvidedCacheLocator.get_suitable_cache_subpath(
            str(directory / "__init__.py")))
    return dirs


def _drop_stale_numba_caches(directory: Path = HERE, extra: bytes = b"") -> bool:
    """Delete the kernels' numba cache files when any kernel source has changed; return whether
    the digest had changed. extra: more kernel source to digest (see the module docstring).

    numba keys a cached function on its own source file alone, so a kernel whose callee in
    another module changed (conv_gemm calling epilogue, say) would load stale machine code
    after an edit or a partial update. A digest of every source here, kept beside the cache
    files of each place numba may cache them (__pycache__, and NUMBA_CACHE_DIR's folder for this
    directory when that is set: each has its own stamp, so switching between them never reads
    files of an older source), tells when to start over. (Installed read-only, numba caches in the
    user's cache directory, but then the sources only change all at once, by a reinstall that
    moves every file's stamp.)"""
    digest = kernel_digest(directory, extra)
    changed = False
    for cache in _numba_cache_dirs(directory):
        stamp = cache / STAMP
        try:
            if stamp.read_text() == digest:
                continue
        except OSError:
            pass
        changed = True
        try:
            cache.mkdir(parents=True, exist_ok=True)
            for path in cache.glob("*.nb[ic]"):
                path.unlink(missing_ok=True)
            tmp = cache / f".{STAMP}.{os.getpid()}"
            tmp.write_text(digest)
            os.replace(tmp, stamp)
        except OSError:  # a read-only install: numba does not cache here either
            pass
    return changed


# epilogue.py's activate_run is generated from the op registry; conv and linear kernels inline it
from codegen.kernels.epilogue import ACTIVATIONS_SOURCE  # noqa: E402

_drop_stale_numba_caches(extra=ACTIVATIONS_SOURCE.encode())


def library_digest() -> str:
    """The digest of the kernel library's sources. Code generated to inline its functions (the
    elementwise loops, codegen/emit/elementwise.py) names its files by it, so that an edit of the
    library gives that code new files and new machine code, never stale cache entries."""
    return _LIBRARY_DIGEST


_LIBRARY_DIGEST = kernel_digest(extra=ACTIVATIONS_SOURCE.encode())
