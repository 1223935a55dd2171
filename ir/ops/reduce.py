"""Reductions over dims: reduce_sum/mean/prod/max/min and argmax/argmin; along one dim, the
scans cumsum/cumprod and topk.

`dims` None reduces every dim (torch.sum(x)); keepdim keeps reduced dims as size 1.
Result dtypes follow torch: sum and prod of integers or bools give int64, mean needs
a floating input, argmax/argmin give int64 indices of the first extremum.
Float sums and means accumulate in float64 so the reference stays accurate for
large reductions (torch accumulates pairwise; plain float32 loops drift).
"""

from __future__ import annotations

import numpy as np

from ir.op_registry import BOOL, INT, INTS, register
from ir.ops.common import normalize_axis
from ir.types import TensorType

_ATTRS = {"dims": INTS(None, optional=True), "keepdim": BOOL(False)}


def reduce_axes(rank: int, axes: tuple[int, ...] | None) -> tuple[int, ...]:
    """Normalised, sorted axes to reduce; all axes when `axes` is None."""
    if axes is None:
        return tuple(range(rank))
    norm = [normalize_axis(a, rank) for a in axes]
    if len(set(norm)) != len(norm):
        raise ValueError(f"reduction axes {axes} repeat an axis")
    return tuple(sorted(set(norm))) if rank else ()


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _is_float(dtype: str) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


def _accumulating_dtype(dtype: str) -> str:
    """torch.sum / torch.prod promote integers and bools to int64."""
    return dtype if _is_float(dtype) else "int64"


def _reduce_type(dtype_rule=lambda dtype: dtype, has_identity: bool = True):
    """Shape rule of a reduction; max and min have no identity, so they refuse empty axes."""

    def infer(types: list[TensorType], attrs: dict) -> TensorType:
        x = types[0]
        axes = reduce_axes(x.rank, attrs["dims"])
        if not has_identity and any(x.shape[a] == 0 for a in axes):
            raise ValueError(f"cannot take the max/min over an empty axis of {x}")
        return TensorType(reduced_shape(x.shape, axes, attrs["keepdim"]), dtype_rule(x.dtype))

    return infer


def _mean_dtype(dtype: str) -> str:
    if not _is_float(dtype):
        raise ValueError(f"mean needs a floating input, got {dtype} (torch refuses it too)")
    return dtype


def _np_axes(x: np.ndarray, dims) -> tuple[int, ...] | None:
    return reduce_axes(x.ndim, dims) if x.ndim else None


@register("reduce_sum", ["x"], _ATTRS, infer=_reduce_type(_accumulating_dtype))
def reduce_sum(x, dims, keepdim):
    out_dtype = _accumulating_dtype(x.dtype.name)
    acc = np.float64 if _is_float(out_dtype) else np.int64
    return np.asarray(np.sum(x, axis=_np_axes(x, dims), keepdims=keepdim, dtype=acc), dtype=out_dtype)


@register("reduce_mean", ["x"], _ATTRS, infer=_reduce_type(_mean_dtype))
def reduce_mean(x, dims, keepdim):
    return np.asarray(np.mean(x, axis=_np_axes(x, dims), keepdims=keepdim, dtype=np.float64), dtype=x.dtype)


@register("reduce_prod", ["x"], _ATTRS, infer=_reduce_type(_accumulating_dtype))
def reduce_prod(x, dims, keepdim):
    out_dtype = _accumulating_dtype(x.dtype.name)
    return np.asarray(np.prod(x, axis=_np_axes(x, dims), keepdims=keepdim, dtype=out_dtype), dtype=out_dtype)


@register("reduce_max", ["x"], _ATTRS, infer=_reduce_type(has_identity=False))
def reduce_max(x, dims, keepdim):
    return np.asarray(np.max(x, axis=_np_axes(x, dims), keepdims=keepdim))


@register("reduce_min", ["x"], _ATTRS, infer=_reduce_type(has_identity=False))
def reduce_min(x, dims, keepdim):
    return np.asarray(np.min(x, axis=_np_axes(x, dims), keepdims=keepdim))


# -- arg reductions ------------------------------------------------------------------------

_ARG_ATTRS = {"dim": INT(None, optional=True), "keepdim": BOOL(False)}


def _arg_type(types: list[TensorType], attrs: dict) -> TensorType:
    """One dim, or the flattened tensor when dim is None (keepdim then keeps every dim as 1)."""
    x, axis = types[0], attrs["dim"]
    if x.size == 0:
        raise ValueError(f"argmax/argmin of an empty tensor {x}")
    axes = reduce_axes(x.rank, None if axis is None else (axis,))
    return TensorType(reduced_shape(x.shape, axes, attrs["keepdim"]), "int64")


def _arg_reduce(fn, x, dim, keepdim):
    if dim is None:
        flat = fn(x.reshape(-1))
        return np.full((1,) * x.ndim if keepdim else (), flat, dtype=np.int64)
    axis = normalize_axis(dim, x.ndim) if x.ndim else None
    return np.asarray(fn(x, axis=axis, keepdims=keepdim), dtype=np.int64)


@register("argmax", ["x"], _ARG_ATTRS, infer=_arg_type)
def argmax(x, dim, keepdim):
    return _arg_reduce(np.argmax, x, dim, keepdim)


@register("argmin", ["x"], _ARG_ATTRS, infer=_arg_type)
def argmin(x, dim, keepdim):
    return _arg_reduce(np.argmin, x, dim, keepdim)


# -- scans ------------------------------------------------------------------------------------

_SCAN_ATTRS = {"dim": INT()}


def _scan_type(types: list[TensorType], attrs: dict) -> TensorType:
    """cumsum / cumprod keep the shape; integers and bools accumulate into int64, as in torch."""
    x = types[0]
    normalize_axis(attrs["dim"], x.rank)
    return TensorType(x.shape, _accumulating_dtype(x.dtype))


def _scan(fn, x: np.ndarray, dim: int) -> np.ndarray:
    """fn (np.cumsum or np.cumprod) along dim; floats accumulate in float64, as torch's CPU kernel
    does (its accumulator is at::acc_type, double for float), then round once to x's dtype."""
    out_dtype = _accumulating_dtype(x.dtype.name)
    acc = np.float64 if _is_float(out_dtype) else np.int64
    flat = x.reshape(1) if x.ndim == 0 else x
    return fn(flat, axis=normalize_axis(dim, flat.ndim), dtype=acc).astype(out_dtype).reshape(x.shape)


@register("cumsum", ["x"], _SCAN_ATTRS, infer=_scan_type)
def cumsum(x, dim):
    return _scan(np.cumsum, x, dim)


@register("cumprod", ["x"], _SCAN_ATTRS, infer=_scan_type)
def cumprod(x, dim):
    return _scan(np.cumprod, x, dim)


# -- topk -------------------------------------------------------------------------------------
#
# torch's CPU kernel (ATen/native/TopKImpl.h, torch 2.x up to at least 2.13) fills a queue of
# (value, index) pairs per row and runs libstdc++'s algorithms on it, with a comparator that
# puts NaN above every number: std::partial_sort when k * 64 <= n (sorted output either way),
# else std::nth_element, then std::sort of the first k - 1 pairs if sorted. With sorted=False
# the order is whatever nth_element leaves, and ties come out in those algorithms' order, so
# the reference runs the same algorithms (below) on every row whose order a plain stable sort
# would not reproduce: unsorted nth_element rows and rows with equal values.

_SORT_THRESHOLD = 16  # libstdc++'s _S_threshold: introsort leaves runs this short to insertion sort


def _before(largest: bool):
    """torch's comparator: does pair a come strictly before pair b in the top-k order?"""
    if largest:
        return lambda a, b: (a[0] != a[0] and b[0] == b[0]) or a[0] > b[0]
    return lambda a, b: (a[0] == a[0] and b[0] != b[0]) or a[0] < b[0]


def _sift_up(q: list, first: int, hole: int, top: int, value, comp) -> None:
    """std::__push_heap on the heap starting at q[first]."""
    parent = (hole - 1) // 2
    while hole > top and comp(q[first + parent], value):
        q[first + hole] = q[first + parent]
        hole, parent = parent, (parent - 1) // 2
    q[first + hole] = value


def _adjust_heap(q: list, first: int, hole: int, length: int, value, comp) -> None:
    """std::__adjust_heap on the heap q[first:first + length]: move the hole down, then sift value up."""
    top, child = hole, hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if comp(q[first + child], q[first + child - 1]):
            child -= 1
        q[first + hole] = q[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        q[first + hole] = q[first + child - 1]
        hole = child - 1
    _sift_up(q, first, hole, top, value, comp)


def _pop_heap(q: list, first: int, last: int, result: int, comp) -> None:
    """std::__pop_heap: the heap's top goes to q[result], whose value is sifted into the heap."""
    value, q[result] = q[result], q[first]
    _adjust_heap(q, first, 0, last - first, value, comp)


def _heap_select(q: list, first: int, middle: int, last: int, comp) -> None:
    """std::__heap_select: q[first:middle] becomes a heap of the elements that come first."""
    length = middle - first
    for parent in range((length - 2) // 2, -1, -1) if length >= 2 else ():
        _adjust_heap(q, first, parent, length, q[first + parent], comp)  # std::__make_heap
    for i in range(middle, last):
        if comp(q[i], q[first]):
            _pop_heap(q, first, middle, i, comp)


def _partial_sort(q: list, first: int, middle: int, last: int, comp) -> None:
    """std::partial_sort: heap-select, then std::__sort_heap."""
    _heap_select(q, first, middle, last, comp)
    for end in range(middle - 1, first, -1):
        _pop_heap(q, first, end, end, comp)


def _insertion_sort(q: list, first: int, last: int, comp) -> None:
    for i in range(first + 1, last):
        value, j = q[i], i
        while j > first and comp(value, q[j - 1]):
            q[j] = q[j - 1]
            j -= 1
        q[j] = value


def _partition_pivot(q: list, first: int, last: int, comp) -> int:
    """std::__unguarded_partition_pivot: median of three to q[first], then Hoare's partition."""
    a, b, c = first + 1, first + (last - first) // 2, last - 1
    if comp(q[a], q[b]):
        median = b if comp(q[b], q[c]) else c if comp(q[a], q[c]) else a
    else:
        median = a if comp(q[a], q[c]) else c if comp(q[b], q[c]) else b
    q[first], q[median] = q[median], q[first]
    lo, hi = first + 1, last
    while True:
        while comp(q[lo], q[first]):
            lo += 1
        hi -= 1
        while comp(q[first], q[hi]):
            hi -= 1
        if lo >= hi:
            return lo
        q[lo], q[hi] = q[hi], q[lo]
        lo += 1


def _depth_limit(n: int) -> int:
    return 2 * (n.bit_length() - 1)  # 2 * std::__lg(n)


def _nth_element(q: list, nth: int, comp) -> None:
    """std::nth_element (introselect)."""
    first, last = 0, len(q)
    if nth == last:
        return
    depth = _depth_limit(last)
    while last - first > 3:
        if depth == 0:
            _heap_select(q, first, nth + 1, last, comp)
            q[first], q[nth] = q[nth], q[first]
            return
        depth -= 1
        cut = _partition_pivot(q, first, last, comp)
        first, last = (cut, last) if cut <= nth else (first, cut)
    _insertion_sort(q, first, last, comp)


def _sort(q: list, first: int, last: int, comp) -> None:
    """std::sort (introsort, then a final insertion sort)."""

    def introsort(first: int, last: int, depth: int) -> None:
        while last - first > _SORT_THRESHOLD:
            if depth == 0:
                _partial_sort(q, first, last, last, comp)
                return
            depth -= 1
            cut = _partition_pivot(q, first, last, comp)
            introsort(cut, last, depth)
            last = cut

    if last - first > 1:
        introsort(first, last, _depth_limit(last - first))
        _insertion_sort(q, first, last, comp)


def _torch_topk_row(row: np.ndarray, k: int, largest: bool, sort: bool) -> list[int]:
    """Indices of one row's top k, in the order torch's CPU kernel leaves them."""
    comp = _before(largest)
    q = [(v, i) for i, v in enumerate(row.tolist())]
    if k * 64 <= len(q):
        _partial_sort(q, 0, k, len(q), comp)
    else:
        _nth_element(q, k - 1, comp)
        if sort:
            _sort(q, 0, k - 1, comp)
    return [i for _, i in q[:k]]


def _topk_type(types: list[TensorType], attrs: dict) -> list[TensorType]:
    x, k = types[0], attrs["k"]
    axis = normalize_axis(attrs["dim"], x.rank)
    size = x.shape[axis] if x.rank else 1
    if not 0 <= k <= size:
        raise ValueError(f"topk: k={k} is out of range for dim {attrs['dim']} of size {size} of {x}")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:] if x.rank else ()
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


def _has_ties(rows: np.ndarray) -> np.ndarray:
    """Per row (last axis): do two elements compare equal (NaNs are all equal to the comparator)?"""
    s = np.sort(rows, axis=-1)
    same = s[..., 1:] == s[..., :-1]
    if np.issubdtype(s.dtype, np.floating):
        same |= np.isnan(s[..., 1:]) & np.isnan(s[..., :-1])
    return same.any(axis=-1)


@register("topk", ["x"], {"k": INT(), "dim": INT(-1), "largest": BOOL(True), "sorted": BOOL(True)},
          infer=_topk_type)
def topk(x, k, dim, largest, sorted):  # noqa: A002 - torch's name
    """torch.topk: values and int64 indices of the k largest (or smallest) along dim; NaN counts
    as larger than any number. Rows whose order a stable sort gives (no ties, sorted output) are
    done with numpy; the others with libstdc++'s algorithms, as torch runs them."""
    axis = normalize_axis(dim, x.ndim) if x.ndim else 0
    rows = np.moveaxis(x.reshape(1) if x.ndim == 0 else x, axis, -1)
    n = rows.shape[-1]
    # the comparator's order (numpy's sort puts NaN last, so descending puts it first)
    if largest:
        order = n - 1 - np.argsort(rows[..., ::-1], axis=-1, kind="stable")[..., ::-1]
    else:
        order = np.argsort(rows, axis=-1, kind="stable")
    indices = order[..., :k].astype(np.int64)
    if k:
        emulate = _has_ties(rows) if (k * 64 <= n or sorted) else np.ones(rows.shape[:-1], bool)
        for pos in map(tuple, np.argwhere(emulate)):
            indices[pos] = _torch_topk_row(rows[pos], k, largest, sorted)
    values = np.take_along_axis(rows, indices, axis=-1)
    values, indices = np.moveaxis(values, -1, axis), np.moveaxis(indices, -1, axis)
    if x.ndim == 0:
        values, indices = values.reshape(()), indices.reshape(())
    return values.copy(), indices.copy()  # contiguous, and 0-d stays 0-d
