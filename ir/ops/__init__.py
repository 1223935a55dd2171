"""Every op family; importing this package registers all IR ops."""

from ir.ops import activation, conv, elementwise  # noqa: F401
