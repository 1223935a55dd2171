"""codegen/opt_level.py: one compile at another LLVM level, numba's default restored after."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba.core import config

from codegen.opt_level import opt_level


def test_the_level_holds_inside_the_block_only_even_on_error():
    default = int(config.OPT)
    with opt_level(1):
        assert int(config.OPT) == 1
    assert int(config.OPT) == default
    with pytest.raises(RuntimeError), opt_level(0):
        raise RuntimeError("a compile failed")
    assert int(config.OPT) == default


def test_a_function_compiled_inside_is_optimised_at_that_level_and_computes_the_same(monkeypatch):
    import numba.core.codegen as numba_codegen

    levels = []
    create = numba_codegen.create_pass_builder

    def spy(tm, opt, **kwargs):
        levels.append(opt)
        return create(tm, opt=opt, **kwargs)

    monkeypatch.setattr(numba_codegen, "create_pass_builder", spy)

    def dot(a, b):
        s = 0.0
        for i in range(a.size):
            s += a[i] * b[i]
        return s

    signature = (numba.float64[::1], numba.float64[::1])
    full, cheap = numba.njit(dot), numba.njit(dot)
    full.compile(signature)
    assert levels and max(levels) == int(config.OPT)  # numba's default (3): function and full module passes
    levels.clear()
    with opt_level(1):
        cheap.compile(signature)
    assert levels and max(levels) == 1
    x = np.arange(10.0)
    assert cheap(x, x) == full(x, x) == 285.0
