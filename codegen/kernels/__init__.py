"""The kernel library: @njit(cache=True, nogil=True) functions shared by every model.

Only kernels live here (the rules that emit calls to them are in codegen/emit/), so the
numba cache files beside them are dropped only when a kernel's source changes."""

import hashlib
import os
from pathlib import Path

import codegen.runtime  # noqa: F401 - sets the OpenMP wait policy before any kernel runs


def _drop_stale_numba_caches() -> None:
    """Delete the kernels' numba cache files when any kernel source has changed.

    numba keys a cached function on its own source file alone, so a kernel whose callee in
    another module changed (conv_gemm calling epilogue, say) would load stale machine code
    after an edit or a partial update. A digest of every source here, kept beside the cache
    files, tells when to start over. (Installed read-only, numba caches elsewhere, but then
    the sources only change all at once, by a reinstall that moves every file's stamp.)"""
    here = Path(__file__).parent
    digest = hashlib.blake2b(b"".join(p.read_bytes() for p in sorted(here.glob("*.py"))), digest_size=16).hexdigest()
    cache = here / "__pycache__"
    stamp = cache / "kernels.digest"
    try:
        if stamp.read_text() == digest:
            return
    except OSError:
        pass
    try:
        cache.mkdir(exist_ok=True)
        for path in cache.glob("*.nb[ic]"):
            path.unlink(missing_ok=True)
        tmp = cache / f".kernels.digest.{os.getpid()}"
        tmp.write_text(digest)
        os.replace(tmp, stamp)
    except OSError:  # a read-only install: numba does not cache here either
        pass


_drop_stale_numba_caches()
