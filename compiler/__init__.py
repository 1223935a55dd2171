"""A JIT graph compiler for PNNX models: compile(path) -> callable on numpy arrays."""

from compiler.api import compile, load_graph
from compiler.model import CompiledModel, TensorSpec
from ir.errors import (
    CodegenUnsupportedError,
    CompilerError,
    InputError,
    IRParseError,
    LinkError,
    ModelFormatError,
    NodeExecutionError,
    RunCancelledError,
    RunTimeoutError,
    ShapeMismatchError,
    UnsupportedOperatorError,
    VerificationError,
)

__version__ = "0.1.0"

__all__ = [
    "CodegenUnsupportedError",
    "CompiledModel",
    "CompilerError",
    "IRParseError",
    "InputError",
    "LinkError",
    "ModelFormatError",
    "NodeExecutionError",
    "RunCancelledError",
    "RunTimeoutError",
    "ShapeMismatchError",
    "TensorSpec",
    "UnsupportedOperatorError",
    "VerificationError",
    "compile",
    "load_graph",
]
