"""Read pnnx's ``.pnnx.param`` (text graph) and ``.pnnx.bin`` (zip of raw weights).

This is the only place that knows pnnx's file syntax, so the rest of the compiler
works on plain dataclasses and never needs torch. The grammar follows
``Graph::load`` and ``Parameter::parse_from_string`` in Tencent/ncnn
``tools/pnnx/src/ir.cpp``, but is stricter: pnnx silently ignores malformed lines,
whereas we raise :class:`ModelFormatError` naming the file and 1-based line.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass, field

import numpy as np

from ir.errors import ModelFormatError, UnsupportedOperatorError

MAGIC = "7767517"

#: pnnx dtype spelling -> numpy dtype. The bin is always little-endian.
NUMPY_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(code)
    for name, code in [
        ("f32", "<f4"), ("f64", "<f8"), ("f16", "<f2"), ("i32", "<i4"), ("i64", "<i8"),
        ("i16", "<i2"), ("i8", "i1"), ("u8", "u1"), ("bool", "?"), ("c64", "<c8"),
        ("c128", "<c16"),
    ]
}
#: Spellings valid in annotations. c32 (complex half) has no numpy dtype, so it may
#: annotate an operand but not an ``@`` attribute. pnnx writes ``null`` for an
#: operand whose type it does not know; we map that to ``dtype=None``.
DTYPES = frozenset(NUMPY_DTYPES) | {"c32"}

Shape = tuple[int | None, ...]

_UINT = re.compile(r"\d+")
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?|(?:inf|nan)(?:\.0)?)",
                    re.IGNORECASE)
_COMPLEX = re.compile(r"[+-]?[\d.]+(?:[eE][+-]?\d+)?[+-][\d.]+(?:[eE][+-]?\d+)?j")
_ANNOTATION = re.compile(r"\(([^()]*)\)(\w+)")
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length
# pnnx stores its entries; another writer may deflate them. One that would inflate more than this (and
# to more than 64 MiB) is refused before it is inflated: a small file must not take gigabytes of memory.
MAX_INFLATE_RATIO = 100
ALWAYS_INFLATE_BYTES = 64 << 20


@dataclass(frozen=True)
class OperandInfo:
    """Shape and dtype of one operand, from a ``#name=(1,3,?,16)f32`` annotation."""

    name: str
    shape: Shape | None  # None entry for a dynamic ('?' or symbolic '%s') dim
    dtype: str | None  # pnnx spelling ('f32', 'i64', ...); None for 'null'


@dataclass
class PnnxOperator:
    """One line of the param file, with its ``@`` attributes loaded from the bin."""

    type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    input_names: list[str]  # argument name per input from '$arg=operand', '' if none
    params: dict[str, object]
    attrs: dict[str, np.ndarray] = field(default_factory=dict)  # read-only arrays
    line: int = 0  # 1-based line in the param file


@dataclass
class PnnxModel:
    """A whole pnnx model: operators in file order and every annotated operand."""

    param_path: str
    bin_path: str
    operators: list[PnnxOperator]
    operands: dict[str, OperandInfo]


AttrDecls = dict[tuple[str, str], tuple[Shape, str]]


def parse_param_value(s: str) -> object:
    """Parse one ``key=value`` value the way pnnx means it.

    ``None``/``()``/``[]`` -> None, ``True``/``False`` -> bool, int, float (also
    ``inf``, ``-inf``, ``nan`` and pnnx's ``nan.0``), ``1e+00+2e+00j`` -> complex,
    ``(a,b)``/``[a,b]`` -> flat tuple of parsed items; anything else is a string.
    Values containing ``%`` (symbolic references) stay raw strings, as in pnnx.
    Never raises: an unparsable value is simply a string.
    """
    if "%" in s:
        return s
    if s in ("None", "()", "[]"):
        return None
    if len(s) >= 2 and s[0] + s[-1] in ("()", "[]"):
        items = s[1:-1].split(",")  # pnnx lists are flat, so a plain split suffices
        if len(items) > 1 and items[-1] == "":
            items.pop()  # tolerate a Python-style trailing comma: (2,)
        return tuple(_parse_scalar(item) for item in items)
    return _parse_scalar(s)


def _parse_scalar(s: str) -> object:
    if s == "None":
        return None
    if s in ("True", "False"):
        return s == "True"
    if _INT.fullmatch(s):
        return int(s)
    if _FLOAT.fullmatch(s):  # pnnx may write nan/inf as 'nan.0', which float() rejects
        return float(s[:-2] if s[-5:].lower() in ("inf.0", "nan.0") else s)
    if _COMPLEX.fullmatch(s):
        return complex(s)
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]  # some writers quote strings
    return s


def _fmt(shape: Shape, dtype: str | None) -> str:
    return "(" + ",".join("?" if d is None else str(d) for d in shape) + f"){dtype or 'null'}"


class _Bfloat16(Exception):  # noqa: N818 - a signal: the annotation is bfloat16 (refused by the operator)
    pass


class _ParamParser:
    """Parses operator lines, carrying the state that spans lines (operand annotations)."""

    def __init__(self, path: str):
        self.path = path
        self.operands: dict[str, OperandInfo] = {}
        self.annotated_at: dict[str, int] = {}
        self.attr_decls: AttrDecls = {}

    def fail(self, message: str, line: int) -> ModelFormatError:
        return ModelFormatError(message, self.path, line)

    def annotation(self, token: str, value: str, line: int, attr: bool) -> tuple[Shape, str | None]:
        """Parse ``(d0,d1,...)dtype``; dims may be '?' or '%sym' (operands only)."""
        m = _ANNOTATION.fullmatch(value)
        if not m:
            raise self.fail(f"bad shape annotation {token!r}: expected '(d0,d1,...)dtype'", line)
        dims: list[int | None] = []
        for d in m.group(1).split(",") if m.group(1) else []:
            if _UINT.fullmatch(d):
                dims.append(int(d))
            elif not attr and (d == "?" or re.fullmatch(r"%\w+", d)):
                dims.append(None)
            else:
                raise self.fail(f"bad dimension {d!r} in shape annotation {token!r}", line)
        dtype = m.group(2)
        if dtype == "null" and not attr:
            return tuple(dims), None
        if dtype == "bf16":  # pnnx's bfloat16 (ir.cpp's type 13): a valid file, a dtype we do not run
            raise _Bfloat16()
        if attr and dtype in DTYPES and dtype not in NUMPY_DTYPES:
            raise self.fail(f"attribute dtype {dtype!r} in {token!r} has no numpy equivalent", line)
        if dtype not in (NUMPY_DTYPES if attr else DTYPES):
            known = ", ".join(sorted(NUMPY_DTYPES if attr else DTYPES))
            raise self.fail(f"unknown dtype {dtype!r} in {token!r} (expected one of {known})", line)
        return tuple(dims), dtype

    def operator(self, tokens: list[str], line: int) -> PnnxOperator:
        if len(tokens) < 4:
            raise self.fail(
                f"expected '<type> <name> <#inputs> <#outputs> <operands...> <key=value...>', "
                f"got {len(tokens)} token(s)", line)
        op_type, name, n_in, n_out = tokens[:4]
        if not (_UINT.fullmatch(n_in) and _UINT.fullmatch(n_out)):
            raise self.fail(f"operator {name!r}: input/output counts {n_in!r} {n_out!r} "
                            "are not non-negative integers", line)
        n_names = int(n_in) + int(n_out)
        names = tokens[4:4 + n_names]
        if len(names) < n_names or any("=" in t for t in names):
            given = len([t for t in names if "=" not in t])
            raise self.fail(f"operator {name!r} declares {n_in} input(s) and {n_out} output(s) "
                            f"but lists only {given} operand name(s)", line)
        inputs, outputs = names[:int(n_in)], names[int(n_in):]
        op = PnnxOperator(op_type, name, inputs, outputs, [""] * len(inputs), {}, {}, line)
        try:
            self.tokens(op, tokens[4 + n_names:], line)
        except _Bfloat16:
            raise UnsupportedOperatorError({f"{op_type} (out of scope: bfloat16 tensors; export the model in float32)":
                                            [name]}, self.path) from None
        return op

    def tokens(self, op: PnnxOperator, tokens: list[str], line: int) -> None:
        """An operator line's key=value tokens: @attribute and #operand annotations, $input keys, params."""
        name = op.name
        for token in tokens:
            key, sep, value = token.partition("=")
            if not sep or not key or key in ("@", "$", "#"):
                raise self.fail(f"operator {name!r}: bad token {token!r}, expected key=value", line)
            if key[0] == "@":
                shape, dtype = self.annotation(token, value, line, attr=True)
                self.attr_decls[(name, key[1:])] = (shape, dtype)  # dtype is never None here
            elif key[0] == "$":
                self.input_key(op, key[1:], value, token, line)
            elif key[0] == "#":
                self.operand(op, key[1:], *self.annotation(token, value, line, attr=False), line)
            else:  # expr is a formula full of commas and parens: keep it verbatim
                op.params[key] = value if key == "expr" else parse_param_value(value)

    def input_key(self, op: PnnxOperator, key: str, value: str, token: str, line: int) -> None:
        free = [i for i, x in enumerate(op.inputs) if x == value and not op.input_names[i]]
        if not free:
            raise self.fail(f"operator {op.name!r}: {token!r} names operand {value!r}, "
                            "which is not an input of this operator", line)
        op.input_names[free[0]] = key

    def operand(self, op: PnnxOperator, name: str, shape: Shape, dtype: str | None,
                line: int) -> None:
        if name not in op.inputs and name not in op.outputs:
            raise self.fail(f"operator {op.name!r} annotates operand {name!r}, "
                            "which is neither its input nor its output", line)
        prev = self.operands.get(name)
        if prev is None:
            self.operands[name] = OperandInfo(name, shape, dtype)
            self.annotated_at[name] = line
        elif (prev.shape, prev.dtype) != (shape, dtype):
            raise self.fail(f"operand {name!r} annotated here as {_fmt(shape, dtype)} but as "
                            f"{_fmt(prev.shape or (), prev.dtype)} on line "
                            f"{self.annotated_at[name]}", line)


def parse_param_text(
    text: str, path: str = "<string>"
) -> tuple[list[PnnxOperator], dict[str, OperandInfo], AttrDecls]:
    """Parse param-file text. Returns operators (with empty ``attrs``), the annotated
    operands, and ``(op name, attr name) -> (shape, dtype)`` for every ``@`` attribute."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != MAGIC:
        first = lines[0].strip() if lines else ""
        raise ModelFormatError(f"bad magic {first[:40]!r}: not a pnnx param file "
                               f"(expected {MAGIC})", path, 1)
    counts = lines[1].split() if len(lines) > 1 else []
    if len(counts) != 2 or not all(_UINT.fullmatch(c) for c in counts):
        raise ModelFormatError("bad counts line: expected '<operator count> <operand count>'",
                               path, 2)
    n_ops, n_operands = int(counts[0]), int(counts[1])
    parser = _ParamParser(path)
    operators: list[PnnxOperator] = []
    names: set[str] = set()
    op_lines: dict[str, int] = {}  # bin entries are keyed by op name, so names must be unique
    for line, text_line in enumerate(lines[2:], start=3):
        tokens = text_line.split()
        if not tokens:  # pnnx never writes blank lines; tolerate them (e.g. at the end)
            continue
        op = parser.operator(tokens, line)
        if op.name in op_lines:
            raise ModelFormatError(f"duplicate operator name {op.name!r} (first on line "
                                   f"{op_lines[op.name]})", path, line)
        op_lines[op.name] = line
        operators.append(op)
        names.update(op.inputs, op.outputs)
    if len(operators) != n_ops:
        raise ModelFormatError(f"counts line declares {n_ops} operator(s) but the file has "
                               f"{len(operators)}", path, 2)
    if len(names) != n_operands:
        raise ModelFormatError(f"counts line declares {n_operands} operand(s) but the "
                               f"operators use {len(names)} distinct operand(s)", path, 2)
    return operators, parser.operands, parser.attr_decls


class _BinArchive:
    """Zero-copy reader of pnnx's zip: stored entries become views into an mmap.

    pnnx stores entries uncompressed, so weights need not be copied into memory;
    the arrays keep the (read-only) mapping alive after the archive is closed.
    """

    def __init__(self, path: str):
        self.path = path
        try:
            with open(path, "rb") as f:
                self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self.zip = zipfile.ZipFile(path)
        except FileNotFoundError:
            raise ModelFormatError("bin file not found (the param file has @ attributes)",
                                   path) from None
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as e:
            raise ModelFormatError(f"not a readable zip archive: {e}", path) from e

    def corrupt(self, entry: str, why: str) -> ModelFormatError:
        return ModelFormatError(f"corrupt zip entry {entry!r}: {why}", self.path)

    def array(self, op: PnnxOperator, attr: str, shape: Shape, dtype: str,
              param_path: str) -> np.ndarray:
        entry = f"{op.name}.{attr}"
        where = f"attribute @{attr} of operator {op.name!r} ({param_path}:{op.line})"
        try:
            info = self.zip.getinfo(entry)
        except KeyError:
            raise ModelFormatError(f"missing entry {entry!r} for {where}", self.path) from None
        np_dtype = NUMPY_DTYPES[dtype]
        count = math.prod(shape)
        if not shape and info.file_size == 0:  # older pnnx wrote no data for a 0-d attribute
            count, shape = 0, (0,)
        expected = count * np_dtype.itemsize
        if info.file_size != expected:
            raise ModelFormatError(
                f"entry {entry!r} has {info.file_size} bytes, expected {expected} "
                f"({_fmt(shape, dtype)}) for {where}", self.path)
        if info.compress_type == zipfile.ZIP_STORED:
            buf, offset = self.mm, self.data_offset(info)
            if zlib.crc32(memoryview(self.mm)[offset:offset + info.file_size]) != info.CRC:  # ~1 GB/s
                raise self.corrupt(entry, "its bytes do not match its CRC-32 (a damaged file)")
        else:
            if info.file_size > max(MAX_INFLATE_RATIO * info.compress_size, ALWAYS_INFLATE_BYTES):
                raise self.corrupt(entry, f"{info.compress_size} bytes would inflate to {info.file_size} (more than "
                                          f"{MAX_INFLATE_RATIO}x): refused, as a zip bomb would be")
            try:
                buf, offset = self.zip.read(entry), 0
            except (zipfile.BadZipFile, zlib.error, NotImplementedError, OSError) as e:
                raise self.corrupt(entry, str(e)) from e
        return np.frombuffer(buf, np_dtype, count, offset).reshape(shape)

    def data_offset(self, info: zipfile.ZipInfo) -> int:
        """Where a stored entry's bytes start. The local header's extra field may differ
        from the central directory's (zip64), so its lengths are read from the local header."""
        start = info.header_offset
        header = self.mm[start:start + 30]
        if len(header) < 30 or header[:4] != b"PK\x03\x04":
            raise self.corrupt(info.filename, "bad local file header")
        name_len, extra_len = _LOCAL_HEADER.unpack(header)[1:]
        offset = start + 30 + name_len + extra_len
        if info.compress_size != info.file_size:
            raise self.corrupt(info.filename, "stored entry with differing compressed size")
        if offset + info.file_size > len(self.mm):
            raise self.corrupt(info.filename, "data extends past the end of the file")
        return offset


def default_bin_path(param_path: str) -> str:
    """``m.pnnx.param`` -> ``m.pnnx.bin``: pnnx writes the pair side by side."""
    return param_path.removesuffix(".param") + ".bin"


def load_pnnx(param_path: str | os.PathLike, bin_path: str | os.PathLike | None = None
              ) -> PnnxModel:
    """Load a pnnx model. Weights are read-only views of the memory-mapped bin; the bin
    is opened only if some operator has ``@`` attributes, so it may then be absent."""
    param = os.fspath(param_path)
    binp = default_bin_path(param) if bin_path is None else os.fspath(bin_path)
    try:
        with open(param, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ModelFormatError("param file not found", param) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ModelFormatError(f"cannot read param file: {e}", param) from e
    operators, operands, attr_decls = parse_param_text(text, param)
    if attr_decls:
        archive = _BinArchive(binp)
        with archive.zip:
            by_name = {op.name: op for op in operators}
            for (op_name, attr), (shape, dtype) in attr_decls.items():
                op = by_name[op_name]
                op.attrs[attr] = archive.array(op, attr, shape, dtype, param)
    return PnnxModel(param, binp, operators, operands)
