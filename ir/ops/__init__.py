"""Every op family; importing this package registers all IR ops."""

from ir.ops import (  # noqa: F401
    activation,
    conv,
    elementwise,
    expression,
    fused,
    linear,
    norm,
    pool,
    reduce,
    resize,
    shape,
)
