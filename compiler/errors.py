"""Typed errors raised by the compiler. Each message says what is wrong and where."""

from __future__ import annotations


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


class ShapeMismatchError(CompilerError):
    """pnnx's recorded shape annotation disagrees with our shape rule for a node."""


class InputError(CompilerError, ValueError):
    """The arrays given to a compiled model do not match its inputs."""


class VerificationError(CompilerError):
    """The IR breaks an invariant; the message names the node and op."""


class IRParseError(CompilerError):
    """IR text could not be parsed; the message names the line."""
