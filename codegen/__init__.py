"""Numba kernel library and the emitter that writes the forward module."""

import codegen.numba_cache  # noqa: F401 - numba's cache saves are locked before anything compiles
