"""Every op family; importing this package registers all IR ops."""

from ir.ops import (  # noqa: F401
    activation,
    attention,
    conv,
    elementwise,
    expression,
    fused,
    indexing,
    layout,
    linear,
    norm,
    pool,
    recurrent,
    reduce,
    resize,
    shape,
)
