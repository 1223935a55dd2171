"""Winograd F(2x2, 3x3) convolution for 3x3 stride-1 convs (Lavin & Gray, 2016).

Each 2x2 output tile is Y = A^T [(G g G^T) * (B^T d B)] A for its 4x4 input tile d and
each 3x3 filter g. Over all tiles that is 16 GEMMs U[k] (O, C) @ V[k] (C, tiles): 2.25x
fewer multiplies than im2col's (O, 9C) @ (9C, 4 * tiles). U = G g G^T depends on the
weights alone, so the emit rule computes it once at compile time (`weight_transform`)
and the forward receives it as a constant.

A run of tile rows goes through three parallel loops, so each loop splits its work
evenly without repeating any of it and every GEMM is as large as the run allows:
  1. input transform, parallel over blocks of input channels (V, written plane by plane);
  2. the 16 GEMMs, parallel over (GEMM, block of output channels), on the microkernel
     (microkernel.py) with U packed into its panels at compile time (`pack_transformed`);
  3. output transform and epilogue, parallel over blocks of output channels.
Runs are as many tile rows as keep V and the products under RUN_BYTES (the whole image
for ResNet-sized inputs); images small enough run several at once, their tiles side by
side in V's rows, so a batch of 7x7 or 14x14 images makes one set of wide GEMMs. The
transforms take W tiles at once (W the vector width) in LLVM IR (`_input_vector`,
`_output_vector`), from a zero-padded copy of the run's rows split into even and odd
columns; rows of fewer than W tiles (7x7 and 14x14 images on AVX2) go tile by tile.

F(4x4, 3x3)'s transforms (input_transform4, output_transform4, weight_transform(weight, 4)) serve the
channel-blocked kernel (blocked.py's winograd_blocked) only.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from codegen.kernels.common import SEQ, aligned_empty, blocks, num_threads, span, u
from codegen.kernels.epilogue import epilogue_run, residual_run
from codegen.kernels.microkernel import MR, gemm_panels, gemm_panels2, half_panels, pack_weights, panels_per_call
from codegen.kernels.tasks import run_tasks
from codegen.kernels.vectors import fma_intrinsic, vector_floats, vector_width

RUN_BYTES = 8 << 20  # V or the products of one run of tile rows, at most
PLANE_BYTES = 1 << 17  # one of V's 16 planes, when several images run at once: the GEMM reads it from L2
PLANE_PAD = 16  # floats between the planes of V and of the products beyond their rows: one cache line
TASK_TILES = 64  # tiles per transform task, at least, where the channels allow (tasks of small images)
MIN_PANELS = 4  # MR-channel panels per block of a product, at least
K_CHUNK = 256  # input channels per microkernel call: a weight panel chunk (6 KB) stays in L1

_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])
# F(4x4, 3x3): 6x6 input windows, 4x4 output tiles, 36 products (2.25 multiplies a product per output
# against F(2x2)'s 4); its B^T and A^T are written out in input_transform4 / output_transform4
_G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])


CHUNK_BYTES = 4 << 20  # float64 products of one chunk of output channels in weight_transform, at most


def transform_chunks(weight: np.ndarray, tile: int = 2, multiple: int = 1):
    """(o0, o1, U of output channels o0:o1 in float64, (a^2, o1 - o0, C)) over the (O, C, 3, 3) weight, in
    chunks of a multiple of `multiple` channels whose products stay under CHUNK_BYTES: weight_transform's."""
    # two BLAS products over every (o, c) of a chunk at once, in float64 (einsum took 3-5x as long). In
    # chunks because a 512 -> 512 conv's float64 products take 75 MB a temporary: arrays that large are
    # mapped fresh from the OS at each allocation, and their first touch took 0.2-0.7 s a conv on the AVX2
    # VM. ResNet-18's cold compile at batch 8 spent 2.8 s packing its F(4x4) weights (cProfile), 1.2 s in
    # chunks, most of which is now the first touch of the packed result itself
    g_ = {2: _G, 4: _G4}[tile]
    a = tile + 2
    o_n, c_n = weight.shape[:2]
    rows = max(multiple, CHUNK_BYTES // (a * a * c_n * 8) // multiple * multiple)
    for o0 in range(0, o_n, rows):
        o1 = min(o_n, o0 + rows)
        g = np.moveaxis(weight[o0:o1].astype(np.float64), (2, 3), (0, 1))  # (3, 3, rows, C): g[a, b]
        t = np.tensordot(g_, g, axes=(1, 0))  # (a, 3, rows, C): (G g)[i, b]
        u = np.tensordot(g_, t, axes=(1, 1))  # (a, a, rows, C): (G g G^T)[i, j] at [j, i]
        yield o0, o1, u.transpose(1, 0, 2, 3).reshape(a * a, o1 - o0, c_n)


def weight_transform(weight: np.ndarray, tile: int = 2) -> np.ndarray:
    """U (a^2, O, C) with U[a*i + j, o, c] = (G g G^T)[i, j] for g = weight[o, c] (3x3), a = tile + 2: F(2x2,
    3x3)'s G for tile 2, F(4x4, 3x3)'s for tile 4."""
    a = tile + 2
    u_ = np.empty((a * a, *weight.shape[:2]), weight.dtype)
    for o0, o1, chunk in transform_chunks(weight, tile):
        u_[:, o0:o1] = chunk
    return u_


def pack_transformed(weight: np.ndarray) -> np.ndarray:
    """The transformed weight U of a (O, C, 3, 3) float32 weight as microkernel panels
    (16, blocks, C, MR): U[k] packed as the weight of one group of a 1x1 conv."""
    u_ = weight_transform(weight)
    return pack_weights(u_.reshape(16 * u_.shape[1], u_.shape[2], 1, 1), 16)


def _vector_step(context, builder, signature, args, arrays):
    """Shared by the transform intrinsics: (the machine's vector width W, a loader of W floats and
    a storer of any float vector, at element offsets of the array arguments at the given indices)."""
    width = vector_width(context)
    pointers = {i: cgutils.create_struct_proxy(signature.args[i])(context, builder, value=args[i]).data
                for i in arrays}

    def at(i, offset, lanes):
        return builder.bitcast(builder.gep(pointers[i], [offset]), ir.VectorType(ir.FloatType(), lanes).as_pointer())

    def load(i, offset):
        return builder.load(at(i, offset, width), align=4)  # any element: not a vector's alignment

    def store(value, i, offset):
        builder.store(value, at(i, offset, value.type.count), align=4)

    return width, load, store


def _int64s(context, builder, signature, args, indices):
    return [context.cast(builder, args[i], signature.args[i], types.int64) for i in indices]


def input_transform(builder, d):
    """LLVM IR of B^T d B for a 4x4 window of vectors (d[r][q]: row r, column q): its 16 values, (i, j)
    at 4i + j."""
    rows = [[builder.fsub(d[0][q], d[2][q]) for q in range(4)], [builder.fadd(d[1][q], d[2][q]) for q in range(4)],
            [builder.fsub(d[2][q], d[1][q]) for q in range(4)], [builder.fsub(d[1][q], d[3][q]) for q in range(4)]]
    return [v for t in rows for v in (builder.fsub(t[0], t[2]), builder.fadd(t[1], t[2]), builder.fsub(t[2], t[1]),
                                      builder.fsub(t[1], t[3]))]


def output_transform(builder, m):
    """LLVM IR of A^T m A for the 16 product vectors of a tile (m[4i + j]): its two output rows, each
    (Y[r, 0], Y[r, 1])."""
    s = [builder.fadd(builder.fadd(m[j], m[4 + j]), m[8 + j]) for j in range(4)]  # A^T along the rows
    t = [builder.fsub(builder.fsub(m[4 + j], m[8 + j]), m[12 + j]) for j in range(4)]
    return [(builder.fadd(builder.fadd(a[0], a[1]), a[2]), builder.fsub(builder.fsub(a[1], a[2]), a[3]))
            for a in (s, t)]  # and along the columns


def _fma_of(builder, vec):
    """(fma(a, b, c), splat(constant)) for LLVM vectors of type vec."""
    fma = fma_intrinsic(builder, vec)
    return (lambda a, b, c: builder.call(fma, [a, b, c])), (lambda k: ir.Constant(vec, [float(k)] * vec.count))


def _bt6(builder, d):
    """F(4x4, 3x3)'s B^T times six vectors d (a column or a row of a 6x6 window), factored as ncnn's."""
    fma, k = _fma_of(builder, d[0].type)
    a, b = fma(k(-4), d[2], d[4]), fma(k(-4), d[1], d[3])  # d4 - 4 d2, d3 - 4 d1
    c, e = builder.fsub(d[4], d[2]), builder.fsub(d[3], d[1])
    return [fma(k(4), d[0], fma(k(-5), d[2], d[4])), builder.fadd(a, b), builder.fsub(a, b), fma(k(2), e, c),
            fma(k(-2), e, c), fma(k(4), d[1], fma(k(-5), d[3], d[5]))]


def _at6(builder, m):
    """F(4x4, 3x3)'s A^T times six vectors m: four."""
    fma, k = _fma_of(builder, m[0].type)
    p, q = builder.fadd(m[1], m[2]), builder.fsub(m[1], m[2])
    r, s = builder.fadd(m[3], m[4]), builder.fsub(m[3], m[4])
    return [builder.fadd(builder.fadd(m[0], p), r), fma(k(2), s, q), fma(k(4), r, p),
            builder.fadd(fma(k(8), s, q), m[5])]


def input_transform4(builder, d):
    """LLVM IR of F(4x4, 3x3)'s B^T d B for a 6x6 window of vectors (d[r][q]): its 36 values, (i, j) at 6i + j."""
    columns = [_bt6(builder, [d[r][q] for r in range(6)]) for q in range(6)]  # columns[q][i] = (B^T d)[i, q]
    return [v for i in range(6) for v in _bt6(builder, [columns[q][i] for q in range(6)])]


def output_transform4(builder, m):
    """LLVM IR of F(4x4, 3x3)'s A^T m A for the 36 product vectors of a tile (m[6i + j]): its four output
    rows of four."""
    columns = [_at6(builder, [m[6 * i + j] for i in range(6)]) for j in range(6)]  # columns[j][r] = (A^T m)[r, j]
    return [_at6(builder, [columns[j][r] for j in range(6)]) for r in range(4)]


@intrinsic
def _input_vector(typingctx, buf, e, half, vf, o, plane):
    """The input transform of W tiles side by side (W: the machine's vector width, `vector_floats`):
    tile t's 4x4 window has rows r = 0..3 at buf[e + 2r*half:], its columns 0, 1, 2, 3 being E[t],
    O[t], E[t + 1], O[t + 1] of the row's even part E and odd part O (half floats each);
    vf[o + (4i + j)*plane + t] = (B^T d B)[i, j]. Written in LLVM IR: numba's loop over the tiles
    stays scalar behind run-time overlap checks of its 16 stores against its loads."""
    if not all(isinstance(a, types.Array) and a.dtype == types.float32 for a in (buf, vf)):
        return None

    def codegen(context, builder, signature, args):
        _, load, store = _vector_step(context, builder, signature, args, (0, 3))
        e_, half_, o_, plane_ = _int64s(context, builder, signature, args, (1, 2, 4, 5))
        one = ir.Constant(ir.IntType(64), 1)
        d = []  # d[r][q]: column q of row r, W tiles
        for r in range(4):
            even = builder.add(e_, builder.mul(ir.Constant(ir.IntType(64), 2 * r), half_))
            odd = builder.add(even, half_)
            d.append([load(0, even), load(0, odd), load(0, builder.add(even, one)), load(0, builder.add(odd, one))])
        for k, value in enumerate(input_transform(builder, d)):
            store(value, 3, builder.add(o_, builder.mul(ir.Constant(ir.IntType(64), k), plane_)))
        return context.get_dummy_value()

    return types.void(buf, e, half, vf, o, plane), codegen


@intrinsic
def _output_vector(typingctx, mf, q, plane, rows, at, row):
    """The output transform of W tiles side by side: m[k] = mf[q + k*plane:][:W] for k = 4i + j,
    Y = A^T m A per tile; rows[at + 2t], rows[at + 2t + 1] = Y[0, 0], Y[0, 1] of tile t and
    rows[at + row + 2t], rows[at + row + 2t + 1] = Y[1, 0], Y[1, 1] (the two output rows)."""
    if not all(isinstance(a, types.Array) and a.dtype == types.float32 for a in (mf, rows)):
        return None

    def codegen(context, builder, signature, args):
        width, load, store = _vector_step(context, builder, signature, args, (0, 3))
        q_, plane_, at_, row_ = _int64s(context, builder, signature, args, (1, 2, 4, 5))
        m = [load(0, builder.add(q_, builder.mul(ir.Constant(ir.IntType(64), k), plane_))) for k in range(16)]
        interleave = ir.Constant(ir.VectorType(ir.IntType(32), 2 * width),
                                 [k // 2 + (k % 2) * width for k in range(2 * width)])
        for out_row, (y0, y1) in zip((at_, builder.add(at_, row_)), output_transform(builder, m)):
            store(builder.shuffle_vector(y0, y1, interleave), 3, out_row)  # y0[t], y1[t] side by side
        return context.get_dummy_value()

    return types.void(mf, q, plane, rows, at, row), codegen


@numba.njit(**SEQ)
def _input_task(task, xf, dims, run, vf, plane, ld):
    """Task (image img, block cb of cpt input channels) of the input transform:
    v[4r + q, c, img*tc + y*TW + tx] = (B^T d B)[r, q] for the 4x4 input tile d of channel c of
    image n0 + img at padded row 2(ty0 + y), column 2tx, for the tc tiles of the run (v's rows
    are ld long and may be longer: the rest is left alone); xf is the input flat, vf is v flat,
    its planes `plane` apart."""
    c_n, h, w, pt, pl = dims
    n0, ty0, tw, tc, cpt = run
    n_cb = -(-c_n // cpt)
    img, cb = task // n_cb, task % n_cb
    ty_n, half, width = tc // tw, tw + 1, vector_floats()
    (e_lo, e_hi), (o_lo, o_hi) = span(-pl, 2, w, half), span(1 - pl, 2, w, half)
    # the run's padded input rows of one channel, each split into its even columns, then its odd
    buf = aligned_empty((2 * ty_n + 2) * 2 * half, np.float32)
    for c in range(cb * cpt, min(c_n, (cb + 1) * cpt)):
        x0, col = ((n0 + img) * c_n + c) * h * w, c * ld + img * tc
        for r in range(2 * ty_n + 2):
            iy, d = 2 * ty0 + r - pt, 2 * r * half
            if 0 <= iy < h:
                s = x0 + iy * w - pl  # padded column z of this row is xf[s + z]
                for k in range(e_lo):
                    buf[u(d + k)] = 0
                for k in range(e_lo, e_hi):
                    buf[u(d + k)] = xf[u(s + 2 * k)]
                for k in range(e_hi, half + o_lo):  # the even part's right padding, the odd part's left
                    buf[u(d + k)] = 0
                for k in range(o_lo, o_hi):
                    buf[u(d + half + k)] = xf[u(s + 2 * k + 1)]
                for k in range(half + o_hi, 2 * half):
                    buf[u(d + k)] = 0
            else:
                for z in range(2 * half):
                    buf[u(d + z)] = 0
        for y in range(ty_n):
            e, o = 4 * y * half, col + y * tw
            if tw >= width:  # W tiles at once, the last W ending at the row's end (overlapping: same values)
                for v in range(-(-tw // width)):
                    tx = min(v * width, tw - width)
                    _input_vector(buf, e + tx, half, vf, o + tx, plane)
            else:
                for tx in range(tw):
                    _input_tile(buf, e + tx, half, vf, o + tx, plane)


@numba.njit(inline="always", **SEQ)
def _input_tile(buf, e, half, vf, o, plane):
    """_input_vector for one tile."""
    r0, r1, r2, r3 = e, e + 2 * half, e + 4 * half, e + 6 * half  # the window's rows: E, then O at + half
    for r in range(4):  # row r of B^T d, its columns c0..c3
        if r == 0:
            c0, c1 = buf[u(r0)] - buf[u(r2)], buf[u(r0 + half)] - buf[u(r2 + half)]
            c2, c3 = buf[u(r0 + 1)] - buf[u(r2 + 1)], buf[u(r0 + half + 1)] - buf[u(r2 + half + 1)]
        elif r == 1:
            c0, c1 = buf[u(r1)] + buf[u(r2)], buf[u(r1 + half)] + buf[u(r2 + half)]
            c2, c3 = buf[u(r1 + 1)] + buf[u(r2 + 1)], buf[u(r1 + half + 1)] + buf[u(r2 + half + 1)]
        elif r == 2:
            c0, c1 = buf[u(r2)] - buf[u(r1)], buf[u(r2 + half)] - buf[u(r1 + half)]
            c2, c3 = buf[u(r2 + 1)] - buf[u(r1 + 1)], buf[u(r2 + half + 1)] - buf[u(r1 + half + 1)]
        else:
            c0, c1 = buf[u(r1)] - buf[u(r3)], buf[u(r1 + half)] - buf[u(r3 + half)]
            c2, c3 = buf[u(r1 + 1)] - buf[u(r3 + 1)], buf[u(r1 + half + 1)] - buf[u(r3 + half + 1)]
        q = o + 4 * r * plane
        vf[u(q)] = c0 - c2
        vf[u(q + plane)] = c1 + c2
        vf[u(q + 2 * plane)] = c2 - c1
        vf[u(q + 3 * plane)] = c1 - c3


@numba.njit(**SEQ)
def _products_task(t, uf, vf, mf, n_o, mbb, n_mb, c_n, ld, v_plane, m_plane):
    """Task t of m[k] = U[k] @ v[k] (k = t // n_o): panels [mb0, mb0 + mbb) of U[k], on the
    microkernel; uf = U packed into panels (16, blocks, C, MR), flat; v's and m's rows are whole
    half panels of NR, ld long; their planes v_plane and m_plane apart."""
    k, mb0 = t // n_o, (t % n_o) * mbb
    mb1 = min(n_mb, mb0 + mbb)
    step = panels_per_call()  # two panels a microkernel call on AVX-512 (micro_gemm2)
    for kb in range(0, c_n, K_CHUNK):
        kc = min(K_CHUNK, c_n - kb)
        for mb in range(mb0, mb1, step):
            a0 = ((k * n_mb + mb) * c_n + kb) * MR
            c0 = k * m_plane + mb * MR * ld
            if mb + 1 < mb1 and step == 2:
                gemm_panels2(kc, uf, a0, c_n * MR, vf, k * v_plane + kb * ld, ld, mf, c0, ld, ld, kb > 0)
            else:
                gemm_panels(kc, uf, a0, vf, k * v_plane + kb * ld, ld, mf, c0, ld, ld, kb > 0)


@numba.njit(inline="always", **SEQ)
def _output_tile(mf, q, plane, rows, at, row):
    """_output_vector for one tile: A^T m along its rows (s, t), then along its columns."""
    s0, s1, s2, s3, t0, t1, t2, t3 = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for j in range(4):
        m0, m1 = mf[u(q + j * plane)], mf[u(q + (4 + j) * plane)]
        m2, m3 = mf[u(q + (8 + j) * plane)], mf[u(q + (12 + j) * plane)]
        a, b = m0 + m1 + m2, m1 - m2 - m3
        if j == 0:
            s0, t0 = a, b
        elif j == 1:
            s1, t1 = a, b
        elif j == 2:
            s2, t2 = a, b
        else:
            s3, t3 = a, b
    rows[u(at)] = s0 + s1 + s2
    rows[u(at + 1)] = s1 - s2 - s3
    rows[u(at + row)] = t0 + t1 + t2
    rows[u(at + row + 1)] = t1 - t2 - t3


@numba.njit(**SEQ)
def _output_task(task, mf, plane, ld, run, of, out_shape, bias, rf, act, alpha, beta, post, post_alpha, post_beta):
    """Task (image img, block ob of cpt output channels) of the output transform: output rows
    2(ty0 + y), 2(ty0 + y) + 1 of channel o of image n0 + img = epilogue(A^T m A) for the
    products m (16 planes `plane` apart in mf, each O or more rows of ld: the run's columns,
    tc tiles per image); rf the residual's run, empty for none."""
    o_n, oh, ow = out_shape
    n0, ty0, tw, tc, cpt = run
    n_ob = -(-o_n // cpt)
    img, ob = task // n_ob, task % n_ob
    n = n0 + img
    rows = aligned_empty(4 * tw, np.float32)  # a tile row's two output rows, 2 * TW each
    width = vector_floats()
    for o in range(ob * cpt, min(o_n, (ob + 1) * cpt)):
        bv = 0.0 if bias is None else float(bias[o])  # epilogue_run's float64 bias: one signature
        for y in range(tc // tw):
            q0 = o * ld + img * tc + y * tw
            if tw >= width:  # W tiles at once, the last W ending at the row's end (overlapping: same values)
                for v in range(-(-tw // width)):
                    tx = min(v * width, tw - width)
                    _output_vector(mf, q0 + tx, plane, rows, 2 * tx, 2 * tw)
            else:
                for t in range(tw):
                    _output_tile(mf, q0 + t, plane, rows, 2 * t, 2 * tw)
            for i in range(2):
                oy = 2 * (ty0 + y) + i
                if oy < oh:
                    d = ((n * o_n + o) * oh + oy) * ow
                    epilogue_run(of, d, ow, rows, 2 * i * tw, bv, rf, act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**SEQ)
def winograd_conv2d(x, up, bias, residual, out, pt, pl, act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv2d(x, 3x3 weight, stride 1, padding top pt / left pl) + bias) + residual),
    up = pack_transformed(weight); bias may be None, residual None or empty for none."""
    n_n, c_n, h, w = x.shape
    o_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    n_mb = up.shape[1]
    o_rows = n_mb * MR  # the products' rows: the output channels, padded to whole panels
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    run_row = 64 * max(c_n, o_rows) * tw  # bytes of V or of the products per tile row
    rows = max(1, min(th, RUN_BYTES // run_row))
    # small images run several at a time, side by side in V's rows: larger GEMMs, fewer hand-overs
    images = max(1, min(n_n, RUN_BYTES // (run_row * th), PLANE_BYTES // (4 * c_n * th * tw))) if rows == th else 1
    ld_max = half_panels(images * rows * tw)
    # V's and the products' 16 planes lie PLANE_PAD floats further apart than their rows need: a
    # transform reads or writes all 16 for each tile, and planes a multiple of 4 KB apart would all
    # fall into one set of the L1 cache
    vbuf = aligned_empty(16 * (c_n * ld_max + PLANE_PAD), np.float32)
    mbuf = aligned_empty(16 * (o_rows * ld_max + PLANE_PAD), np.float32)
    xf, uf, of = x.reshape(-1), up.reshape(-1), out.reshape(-1)
    rf = residual_run(residual, out)
    n_o, mbb = blocks(16, n_mb, MIN_PANELS)
    for n0 in range(0, n_n, images):
        ni = min(images, n_n - n0)
        for ty0 in range(0, th, rows):
            tc = min(rows, th - ty0) * tw  # tiles per image in this run
            ld = half_panels(ni * tc)  # v's and m's rows: the run's tiles, padded to whole half panels
            v_plane, m_plane = c_n * ld + PLANE_PAD, o_rows * ld + PLANE_PAD
            vf, mf = vbuf[:16 * v_plane], mbuf[:16 * m_plane]
            c_per, o_per = _channels_per_task(ni * c_n, tc), _channels_per_task(ni * o_n, tc)
            run_tasks(_input_task, ni * -(-c_n // c_per), (xf, (c_n, h, w, pt, pl), (n0, ty0, tw, tc, c_per), vf,
                                                           v_plane, ld))
            run_tasks(_products_task, 16 * n_o, (uf, vf, mf, n_o, mbb, n_mb, c_n, ld, v_plane, m_plane))
            run_tasks(_output_task, ni * -(-o_n // o_per), (mf, m_plane, ld, (n0, ty0, tw, tc, o_per), of,
                                                            (o_n, oh, ow), bias, rf, act, alpha, beta, post,
                                                            post_alpha, post_beta))


@numba.njit(**SEQ)
def _channels_per_task(jobs, tiles):
    """Channels per transform task: enough for TASK_TILES tiles, while there are jobs (images times
    channels) for 4 tasks per thread."""
    return max(1, min(TASK_TILES // tiles, jobs // (4 * num_threads())))
