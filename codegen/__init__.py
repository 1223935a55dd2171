"""Numba kernel library and the emitter that writes the forward module."""
