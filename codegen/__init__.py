"""Numba kernel library and the emitter that writes the forward module."""

from codegen.numba_support import check_installed

check_installed()  # before numba's internals are used or patched: a clear error on an untested numba

import codegen.numba_cache  # noqa: E402, F401 - numba's cache saves are locked before anything compiles
