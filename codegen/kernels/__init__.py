"""The kernel library: @njit(cache=True, nogil=True) functions shared by every model,
each family with the emit rules that call them."""

import codegen.runtime  # noqa: F401 - sets the OpenMP wait policy before any kernel runs
from codegen.kernels import (  # noqa: F401
    conv,
    data,
    elementwise,
    gemm,
    norm,
    pool,
    reduce,
    resize,
)
