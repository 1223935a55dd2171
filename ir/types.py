"""Tensor types: a static shape and a dtype, with the short spellings the IR text uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# IR spelling -> numpy dtype name. pnnx uses the same short names.
DTYPES: dict[str, str] = {
    "f32": "float32",
    "f64": "float64",
    "f16": "float16",
    "i64": "int64",
    "i32": "int32",
    "i16": "int16",
    "i8": "int8",
    "u8": "uint8",
    "bool": "bool",
}
_SHORT = {v: k for k, v in DTYPES.items()}


def short_dtype(dtype: str | np.dtype) -> str:
    """The IR spelling ('f32') of a numpy dtype or dtype name."""
    name = np.dtype(dtype).name
    if name not in _SHORT:
        raise ValueError(f"dtype {name} has no IR spelling; supported: {sorted(_SHORT)}")
    return _SHORT[name]


@dataclass(frozen=True)
class TensorType:
    """A tensor's static shape and numpy dtype name ('float32')."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).name)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def __str__(self) -> str:
        return f"{short_dtype(self.dtype)}[{','.join(str(d) for d in self.shape)}]"

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        return TensorType(tuple(array.shape), array.dtype.name)
