"""Shape helpers shared by the op families, and scipy.special for the references that need it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ir.types import TensorType


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ValueError(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast") from None


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def same_as_first(types: list[TensorType], attrs: dict) -> TensorType:
    return types[0]


def promote(types: Sequence[TensorType]) -> str:
    """numpy's result dtype for the given tensor types (as torch would for same-kind tensors)."""
    return np.result_type(*[np.dtype(t.dtype) for t in types]).name


def check_window(kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int) -> None:
    """A sliding window's kernel, stride and dilation are positive and its pads not negative (a hand-edited
    file's stride=(0,0) would otherwise divide by zero, its kernel_size=(0,0) slide nothing)."""
    if kernel < 1 or stride < 1 or dilation < 1 or pad_begin < 0 or pad_end < 0:
        raise ValueError(f"kernel {kernel}, stride {stride} and dilation {dilation} must be positive and "
                         f"padding {pad_begin}+{pad_end} not negative")


def conv_out_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                  dilation: int = 1, ceil_mode: bool = False) -> int:
    """Output length of a sliding window (conv or pool), as torch computes it."""
    check_window(kernel, stride, pad_begin, pad_end, dilation)
    span = size + pad_begin + pad_end - dilation * (kernel - 1) - 1
    if span < 0:
        padded = size + pad_begin + pad_end
        raise ValueError(f"window {kernel} (dilation {dilation}) is larger than padded input {padded}")
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    # torch: with ceil_mode the last window must start inside the input or left padding
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def scipy_special():
    """scipy.special, imported when a reference first needs it (erf, expit, gammaln): importing it costs
    ~0.3 s (its array-API layer pulls in numpy.f2py and more), which `import compiler` paid for every user."""
    from scipy import special

    return special
