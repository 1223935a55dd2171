"""Import every rule family so their @lowers registrations run."""

from compiler.lowering import activation, conv  # noqa: F401
