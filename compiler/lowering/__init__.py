"""pnnx -> IR lowering: the driver (core.py) and one rule module per op family."""

from compiler.lowering.core import (
    DynamicInputError,
    OpContext,
    Unsupported,
    check_supported,
    declared_inputs,
    declared_outputs,
    lower_model,
    lowers,
    supported_pnnx_types,
)

__all__ = ["DynamicInputError", "OpContext", "Unsupported", "check_supported", "declared_inputs", "declared_outputs",
           "lower_model", "lowers", "supported_pnnx_types"]
