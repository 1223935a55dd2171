"""pnnx -> IR lowering: the driver (core.py) and one rule module per op family."""

from compiler.lowering.core import OpContext, Unsupported, lower_model, lowers, supported_pnnx_types

__all__ = ["OpContext", "Unsupported", "lower_model", "lowers", "supported_pnnx_types"]
