"""numba's on-disk cache, made safe for processes that compile at the same time.

numba saves a compiled function (one signature) by reading the function's index
file, picking the first free data-file number, writing the index back, then the data
file. Two processes saving two signatures of one kernel at once can pick the same
number: one index entry is lost, and worse, the surviving entry can name the other
signature's machine code, which a later load would call with the wrong argument types.
Parallel test workers, or two users' processes compiling different models, do exactly
that with our shared kernel library. Here each save holds a file lock on its index.

Loads need no lock: numba replaces the index and data files atomically, and a load
that finds an entry's data missing compiles again.
"""

from __future__ import annotations

import functools

import filelock
from numba.core import caching

_save = caching.IndexDataCacheFile.save


@functools.wraps(_save)
def _locked_save(self, key, data):
    with filelock.FileLock(f"{self._index_path}.lock"):  # numba-internal (0.68): the index file's path
        return _save(self, key, data)


caching.IndexDataCacheFile.save = _locked_save
