"""view(buffer, offset, dtype, shape): an array over part of a flat buffer, built in a few instructions;
reshaped(array, shape) and emptied(array), the same for a reshape and an empty slice; frozen(array),
the array typed read-only (codegen/kernels/common.py); copied(dst, src), dst[...] = src as a memcpy.

A generated forward binds every weight to a view of the packed weights and every intermediate
to a view of the arena. Written as numpy (`arena[a:b].view(np.float32).reshape(shape)`), each
view lowers to numba's general slicing, dtype-view and reshape code (bounds and size checks, a
call to its reshape helper, a tuple of shape checks): ~100 ms of compile time per view, and
more than linearly in their number (100 weight views: 12 s, 200: 34 s). The emitter knows
that each view fits and is aligned, so this intrinsic fills the array's fields directly.
"""

from __future__ import annotations

import math

import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic

from codegen.kernels.common import frozen, new_reference


@intrinsic
def view(typingctx, buffer, offset, dtype, shape):
    """The C-contiguous array of `shape` and `dtype` at byte `offset` of the contiguous 1-d
    `buffer`, sharing its memory (read-only if the buffer is). Unchecked: the caller guarantees
    that it fits in the buffer and that offset is a multiple of the dtype's alignment."""
    if not (isinstance(buffer, types.Array) and buffer.ndim == 1 and buffer.layout == "C"
            and isinstance(offset, types.Integer) and isinstance(dtype, types.NumberClass)
            and isinstance(shape, types.BaseTuple) and all(isinstance(d, types.Integer) for d in shape)):
        return None
    result = types.Array(dtype.dtype, len(shape), "C", readonly=not buffer.mutable)

    def codegen(context, builder, signature, args):
        # the array's fields by value (no stack slots: numba's struct proxies would add two per view)
        intp = context.get_value_type(types.intp)
        meminfo, parent = builder.extract_value(args[0], 0), builder.extract_value(args[0], 1)
        base = builder.extract_value(args[0], 4)  # data pointer
        dims = [context.cast(builder, d, t, types.intp) for d, t in
                zip(cgutils.unpack_tuple(builder, args[3], len(shape)), shape)]
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(result.dtype)))
        strides, step, nitems = [], itemsize, context.get_constant(types.intp, 1)
        for d in reversed(dims):
            strides.insert(0, step)
            step, nitems = builder.mul(step, d), builder.mul(nitems, d)
        start = builder.add(builder.ptrtoint(base, intp), context.cast(builder, args[1], offset, types.intp))
        data = builder.inttoptr(start, context.get_data_type(result.dtype).as_pointer())
        value = context.get_value_type(result)(None)  # undef
        for i, field in enumerate([meminfo, parent, nitems, itemsize, data]):
            value = builder.insert_value(value, field, i)
        for i, (d, st) in enumerate(zip(dims, strides)):
            value = builder.insert_value(value, d, [5, i])
            value = builder.insert_value(value, st, [6, i])
        new_reference(context, builder, result, value)
        return value

    return result(buffer, offset, dtype, shape), codegen


@intrinsic
def reshaped(typingctx, array, shape):
    """array.reshape(shape) for a C-contiguous array: the same memory with new dims, built by value
    (numba's reshape checks and calls a helper, at ~10x the compile time). shape: an int or a tuple
    of ints, of which one may be -1 (the rest of the elements). Unchecked: the caller
    guarantees that the sizes agree."""
    if not (isinstance(array, types.Array) and array.layout == "C"):
        return None
    dims_t = tuple(shape) if isinstance(shape, types.BaseTuple) else (shape,)
    if not all(isinstance(d, types.Integer) for d in dims_t):
        return None
    result = array.copy(ndim=len(dims_t), layout="C")

    def codegen(context, builder, signature, args):
        tuple_shape = isinstance(shape, types.BaseTuple)
        values = cgutils.unpack_tuple(builder, args[1], len(dims_t)) if tuple_shape else [args[1]]
        dims = [context.cast(builder, v, t, types.intp) for v, t in zip(values, dims_t)]
        one = context.get_constant(types.intp, 1)
        known = one  # the product of the given dims; a negative one (-1) stands for the rest
        for d in dims:
            known = builder.mul(known, builder.select(builder.icmp_signed("<", d, d.type(0)), one, d))
        rest = builder.sdiv(builder.extract_value(args[0], 2), builder.select(
            builder.icmp_signed("==", known, known.type(0)), one, known))
        dims = [builder.select(builder.icmp_signed("<", d, d.type(0)), rest, d) for d in dims]
        itemsize = builder.extract_value(args[0], 3)
        strides, step = [], itemsize
        for d in reversed(dims):
            strides.insert(0, step)
            step = builder.mul(step, d)
        value = context.get_value_type(result)(None)  # undef
        for i in range(5):  # meminfo, parent, nitems, itemsize, data: the same
            value = builder.insert_value(value, builder.extract_value(args[0], i), i)
        for i, (d, st) in enumerate(zip(dims, strides)):
            value = builder.insert_value(value, d, [5, i])
            value = builder.insert_value(value, st, [6, i])
        new_reference(context, builder, result, value)
        return value

    return result(array, shape), codegen


@intrinsic
def emptied(typingctx, array):
    """array[:0] for a C-contiguous array (no elements, the same type), built by value: numba's
    slicing lowers to bounds and step code at ~30x the compile time. The forward passes one as
    "no residual" to conv and linear kernels (codegen/emit/gemm.py, no_residual)."""
    if not (isinstance(array, types.Array) and array.layout == "C" and array.ndim >= 1):
        return None

    def codegen(context, builder, signature, args):
        zero = context.get_constant(types.intp, 0)
        value = builder.insert_value(args[0], zero, 2)  # nitems
        value = builder.insert_value(value, zero, [5, 0])  # shape[0]
        new_reference(context, builder, array, value)
        return value

    return array(array), codegen


@intrinsic
def copied(typingctx, dst, src):
    """dst[...] = src for two C-contiguous arrays of one dtype and as many elements, as one memcpy: the
    forward's copy of a value into an output array of the caller's. numba's array assignment lowers a
    broadcasting loop for each pair of types, ~0.35 s of compile time each (a model of 27 pools, whose
    outputs are views: 9.6 s of its forward's ~20 s compile). Unchecked: the caller guarantees that the
    sizes agree and that the two do not overlap (the output is the caller's own, fresh array)."""
    if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.layout == "C"
            and src.layout == "C" and dst.dtype == src.dtype and dst.mutable):
        return None

    def codegen(context, builder, signature, args):
        out = context.make_array(dst)(context, builder, args[0])
        value = context.make_array(src)(context, builder, args[1])
        cgutils.raw_memcpy(builder, out.data, value.data, out.nitems, out.itemsize)
        return context.get_dummy_value()

    return types.none(dst, src), codegen


def _numpy_copied(dst: np.ndarray, src: np.ndarray) -> None:
    dst[...] = src


def _numpy_view(buffer: np.ndarray, offset: int, dtype, shape) -> np.ndarray:
    dtype = np.dtype(dtype)
    count = math.prod(shape) if isinstance(shape, tuple) else shape
    return buffer.view(np.uint8)[offset:offset + count * dtype.itemsize].view(dtype).reshape(shape)


def _numpy_frozen(array: np.ndarray) -> np.ndarray:
    frozen = array.view()
    frozen.flags.writeable = False
    return frozen


# frozen(array): the same array typed read-only (codegen/kernels/common.py; Emit.weight passes computed weights so)
INTRINSICS = {"view": view, "reshaped": reshaped, "emptied": emptied, "frozen": frozen, "copied": copied}
# the same functions in numpy (same arrays: C-contiguous, read-only if their buffer is), for code that
# runs a forward's lines in Python: codegen/linker.py does, to find its kernel calls
IN_NUMPY = {"view": _numpy_view, "reshaped": lambda array, shape: array.reshape(shape),
            "emptied": lambda array: array[:0], "frozen": _numpy_frozen, "copied": _numpy_copied}
