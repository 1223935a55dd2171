"""Every error this package raises on purpose, in one hierarchy. Each message says what is wrong and where.

It lives in the IR, the bottom layer, and imports nothing else of ours, so every layer
(ir, codegen, compiler) can raise these; `compiler` re-exports them as its public API.

    CompilerError
    ├── ModelFormatError          a .pnnx.param/.bin file is malformed (names file and line)
    │   └── ShapeMismatchError    pnnx's shape annotation disagrees with our shape rule
    ├── UnsupportedOperatorError  operators we cannot lower (all listed at once)
    ├── InputError                arrays given to a model do not match its inputs
    ├── VerificationError         the IR breaks an invariant (names node and op)
    ├── IRParseError              IR text could not be parsed (names the line)
    ├── CodegenUnsupportedError   the numba backend cannot generate code for a node (names it)
    ├── LinkError                 a kernel call of the generated forward cannot be bound
    ├── NodeExecutionError        a node failed while running (names it)
    └── RunCancelledError         a run was cancelled (names the node it stopped at)
        └── RunTimeoutError       ... because it passed its deadline (also a TimeoutError)
"""

from __future__ import annotations

from concurrent.futures import CancelledError


class CompilerError(Exception):
    """Base class of every error this package raises on purpose."""


class ModelFormatError(CompilerError):
    """A .pnnx.param or .pnnx.bin file is malformed or inconsistent.

    The message names the file and, for the param file, the 1-based line.
    """

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class UnsupportedOperatorError(CompilerError):
    """The model uses operators we cannot lower; all of them are listed at once."""

    def __init__(self, unsupported: dict[str, list[str]], path: str | None = None):
        self.unsupported = unsupported  # op type -> node names using it
        lines = [
            f"  {op_type}: {', '.join(names)}" for op_type, names in sorted(unsupported.items())
        ]
        where = f" in {path}" if path else ""
        super().__init__(
            f"{len(unsupported)} unsupported operator type(s){where}:\n" + "\n".join(lines)
        )


class ShapeMismatchError(ModelFormatError):
    """pnnx's recorded shape annotation disagrees with our shape rule for a node: an inconsistent file,
    so a ModelFormatError (naming the file, line and operator) of its own kind."""


class InputError(CompilerError, ValueError):
    """The arrays given to a compiled model do not match its inputs."""


class VerificationError(CompilerError):
    """The IR breaks an invariant; the message names the node and op."""


class IRParseError(CompilerError):
    """IR text could not be parsed; the message names the line."""


class CodegenUnsupportedError(CompilerError):
    """The numba backend cannot generate code for some node(s); the message names each and its op."""


class LinkError(CompilerError):
    """A kernel call of the generated forward cannot be bound by address."""


class NodeExecutionError(CompilerError, RuntimeError):
    """A node failed while running; the message names it."""


class RunCancelledError(CompilerError, CancelledError):
    """A run was cancelled before it finished; `node` is the node it stopped at (None: before the first)."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node


class RunTimeoutError(RunCancelledError, TimeoutError):
    """A run passed the deadline given by run(..., timeout=s)."""
