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

A load also skips numba's first step (load_cached): a warm load of a model loads machine code
only, and numba's refresh of its typing and lowering registries, which only compiling needs,
took half of one.
"""

from __future__ import annotations

import functools

import filelock
from numba.core import caching
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher
from numba.core.runtime import rtsys

_save = caching.IndexDataCacheFile.save


@functools.wraps(_save)
def _locked_save(self, key, data):
    with filelock.FileLock(f"{self._index_path}.lock"):  # numba-internal (0.68): the index file's path
        return _save(self, key, data)


caching.IndexDataCacheFile.save = _locked_save


def load_cached(dispatcher: Dispatcher, args: tuple) -> bool:
    """Whether `dispatcher` has machine code for argument types `args`, loading it from numba's on-disk
    cache if need be (False: not cached; compile it).

    What Dispatcher.compile does on a cache hit, without its first step: numba's cache refreshes the
    typing and lowering registries before every load, which the first time in a process imports ~100 of
    numba's modules and installs ~2000 templates (0.3-0.5 s of a ResNet-18's 1.3-1.8 s warm load on a
    Zen 3 EPYC), though a load only unpickles machine code. Running it needs numba's runtime (NRT),
    started here. A compile later in the process refreshes the registries as it always does."""
    args = tuple(args)
    if args in dispatcher.overloads:
        return True
    cache = dispatcher._cache  # numba-internal (0.68): Dispatcher._cache, Cache._load_overload
    if not isinstance(cache, caching.Cache):  # not cache=True
        return False
    with global_compiler_lock:
        if args in dispatcher.overloads:  # another thread loaded it meanwhile
            return True
        context = dispatcher.targetctx
        rtsys.initialize(context)
        with cache._guard_against_spurious_io_errors():
            result = cache._load_overload(args, context)
        if result is None:
            return False
        dispatcher._cache_hits[args] += 1
        if not result.objectmode:
            context.insert_user_function(result.entry_point, result.fndesc, [result.library])
        dispatcher.add_overload(result)
        return True
