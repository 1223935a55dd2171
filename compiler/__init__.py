"""A JIT graph compiler for PNNX models: compile(path) -> callable on numpy arrays."""

from compiler.api import compile, load_graph
from compiler.errors import (
    CompilerError,
    InputError,
    ModelFormatError,
    ShapeMismatchError,
    UnsupportedOperatorError,
    VerificationError,
)
from compiler.model import CompiledModel, TensorSpec

__version__ = "0.1.0"

__all__ = [
    "CompiledModel",
    "CompilerError",
    "InputError",
    "ModelFormatError",
    "ShapeMismatchError",
    "TensorSpec",
    "UnsupportedOperatorError",
    "VerificationError",
    "compile",
    "load_graph",
]
