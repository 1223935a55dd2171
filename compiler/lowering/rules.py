"""Import every rule family so their @lowers registrations run."""

from compiler.lowering import (  # noqa: F401
    activation,
    conv,
    expression,
    join,
    linear,
    norm,
    pool,
    reduce,
    resize,
    shape,
)
