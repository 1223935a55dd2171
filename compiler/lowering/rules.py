"""Import every rule family so their @lowers registrations run."""

from compiler.lowering import (  # noqa: F401
    activation,
    attention,
    conv,
    expression,
    indexing,
    join,
    linear,
    norm,
    pool,
    recurrent,
    reduce,
    resize,
    shape,
)
