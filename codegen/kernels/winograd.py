"""Winograd F(2x2, 3x3) convolution for 3x3 stride-1 convs (Lavin & Gray, 2016).

Each 2x2 output tile is Y = A^T [(G g G^T) * (B^T d B)] A for its 4x4 input tile d and
each 3x3 filter g. Over all tiles that is 16 GEMMs U[k] (O, C) @ V[k] (C, tiles): 2.25x
fewer multiplies than im2col's (O, 9C) @ (9C, 4 * tiles). U = G g G^T depends on the
weights alone, so the emit rule computes it once at compile time (`weight_transform`)
and the forward receives it as a constant.

A run of tile rows goes through three parallel loops, so each loop splits its work
evenly without repeating any of it and every GEMM is as large as the run allows:
  1. input transform, parallel over input channels (V, written plane by plane);
  2. the 16 GEMMs, parallel over (GEMM, block of output channels), on the microkernel
     (microkernel.py) with U packed into its panels at compile time (`pack_transformed`);
  3. output transform and epilogue, parallel over output channels.
Runs are as many tile rows as keep V and the products under RUN_BYTES (the whole image
for ResNet-sized inputs). The transforms are loops over whole rows with one store each,
on columns split by parity first, so every access is unit-stride and LLVM vectorises them.
"""

from __future__ import annotations

import numba
import numpy as np

from codegen.kernels.common import SEQ, blocks, span, u
from codegen.kernels.epilogue import epilogue_run, residual_run
from codegen.kernels.microkernel import MR, micro_gemm, pack_weights, panel_width
from codegen.kernels.tasks import run_tasks

RUN_BYTES = 8 << 20  # V or the products of one run of tile rows, at most
MIN_PANELS = 4  # MR-channel panels per block of a product, at least
K_CHUNK = 256  # input channels per microkernel call: a weight panel chunk (6 KB) stays in L1

_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def weight_transform(weight: np.ndarray) -> np.ndarray:
    """U (16, O, C) with U[4i + j, o, c] = (G g G^T)[i, j] for g = weight[o, c] (3x3)."""
    u_ = np.einsum("ia,ocab,jb->ijoc", _G, weight.astype(np.float64), _G, optimize=True)
    return np.ascontiguousarray(u_.reshape(16, weight.shape[0], weight.shape[1]), dtype=weight.dtype)


def pack_transformed(weight: np.ndarray) -> np.ndarray:
    """The transformed weight U of a (O, C, 3, 3) float32 weight as microkernel panels
    (16, blocks, C, MR): U[k] packed as the weight of one group of a 1x1 conv."""
    u_ = weight_transform(weight)
    return pack_weights(u_.reshape(16 * u_.shape[1], u_.shape[2], 1, 1), 16)


@numba.njit(inline="always", **SEQ)
def _rows_bt(dst, d, dn, src, s0, s1, s2, s3, n):
    """B^T's four rows of the four runs a_i = src[s_i ..][:n] (or B's four columns), each written
    as dst[d + j*dn ..][:n]: a0 - a2, a1 + a2, a2 - a1, a1 - a3. One pass, unit stride."""
    for k in range(n):
        a0, a1, a2, a3 = src[u(s0 + k)], src[u(s1 + k)], src[u(s2 + k)], src[u(s3 + k)]
        dst[u(d + k)] = a0 - a2
        dst[u(d + dn + k)] = a1 + a2
        dst[u(d + 2 * dn + k)] = a2 - a1
        dst[u(d + 3 * dn + k)] = a1 - a3


@numba.njit(inline="always", **SEQ)
def _rows_at(dst, d, dn, src, s0, s1, s2, s3, n):
    """A^T's two rows of the four runs src[s_i ..][:n]: s0 + s1 + s2 to dst[d ..] and
    s1 - s2 - s3 to dst[d + dn ..], n each. One pass, unit stride."""
    for k in range(n):
        m1, m2 = src[u(s1 + k)], src[u(s2 + k)]
        dst[u(d + k)] = src[u(s0 + k)] + m1 + m2
        dst[u(d + dn + k)] = m1 - m2 - src[u(s3 + k)]


@numba.njit(**SEQ)
def _input_task(c, xf, x0, h, w, pt, pl, ty0, tw, tc, vf, plane, ld):
    """Task c of the input transform: v[4r + q, c, y*TW + tx] = (B^T d B)[r, q] for the 4x4 input
    tile d of channel c at padded row 2(ty0 + y), column 2tx, for the tc tiles of the run (v's
    rows, ld long, may be longer: the rest is left alone); channel c of the image starts at
    xf[x0 + c*H*W]; vf is v flat, plane = C * ld."""
    half = tw + 1
    (e_lo, e_hi), (o_lo, o_hi) = span(-pl, 2, w, half), span(1 - pl, 2, w, half)
    # rows 0-3: the tile row's four padded input rows, even columns then odd (TW + 1 each);
    # rows 4-7: B^T d of those, laid out alike
    buf = np.zeros(16 * half, np.float32)
    for y in range(tc // tw):
        for r in range(4):
            iy, d = 2 * (ty0 + y) + r - pt, 2 * r * half
            if 0 <= iy < h:
                s = x0 + (c * h + iy) * w - pl  # padded column z of this row is xf[s + z]
                for z in range(e_lo, e_hi):
                    buf[u(d + z)] = xf[u(s + 2 * z)]
                for z in range(o_lo, o_hi):
                    buf[u(d + half + z)] = xf[u(s + 2 * z + 1)]
            else:
                for z in range(2 * half):
                    buf[u(d + z)] = 0
        t, n = 8 * half, 2 * half
        _rows_bt(buf, t, n, buf, 0, n, 2 * n, 3 * n, n)  # B^T d: d0 - d2, d1 + d2, d2 - d1, d1 - d3
        for r in range(4):  # then B along the columns of its row r: tile tx's four columns
            e, o = t + r * n, t + r * n + half  # are its even and odd columns tx, then tx + 1
            _rows_bt(vf, 4 * r * plane + c * ld + y * tw, plane, buf, e, o, e + 1, o + 1, tw)


@numba.njit(**SEQ)
def _products_task(t, uf, vf, mf, n_o, mbb, n_mb, c_n, ld):
    """Task t of m[k] = U[k] @ v[k] (k = t // n_o): panels [mb0, mb0 + mbb) of U[k], on the
    microkernel; uf = U packed into panels (16, blocks, C, MR), flat; v's and m's rows are whole
    panels of NR, ld long."""
    nr = panel_width()
    k, mb0 = t // n_o, (t % n_o) * mbb
    mb1 = min(n_mb, mb0 + mbb)
    for kb in range(0, c_n, K_CHUNK):
        kc = min(K_CHUNK, c_n - kb)
        for mb in range(mb0, mb1):
            a0 = ((k * n_mb + mb) * c_n + kb) * MR
            c0 = (k * n_mb + mb) * MR * ld
            for j in range(0, ld, nr):
                micro_gemm(kc, uf, a0, vf, (k * c_n + kb) * ld + j, ld, mf, c0 + j, ld, kb > 0)


@numba.njit(**SEQ)
def _output_task(o, mf, plane, ld, tc, of, out_shape, n, ty0, tw, bias, rf, act, alpha, beta, post, post_alpha,
                 post_beta):
    """Task o of the output transform: output rows 2(ty0 + y), 2(ty0 + y) + 1 of channel o of
    image n = epilogue(A^T m A) for the products m (16, O or more, tc tiles or more; mf flat,
    plane = m.shape[1] * ld); rf the residual's run, empty for none."""
    o_n, oh, ow = out_shape
    s = np.empty(8 * tw, np.float32)  # A^T m: rows 0-3 for output row 0, 4-7 for row 1
    y2 = np.empty(4 * tw, np.float32)  # A^T m A: even, odd columns of row 0, then of row 1
    row = np.empty(2 * tw, np.float32)
    bv = 0.0 if bias is None else bias[o]
    for y in range(tc // tw):
        q = o * ld + y * tw
        for k in range(4):  # A^T along the tile's rows
            m0, m1, m2, m3 = q + k * plane, q + (4 + k) * plane, q + (8 + k) * plane, q + (12 + k) * plane
            _rows_at(s, k * tw, 4 * tw, mf, m0, m1, m2, m3, tw)
        for i in range(2):  # and along its columns
            a = 4 * i * tw
            _rows_at(y2, 2 * i * tw, tw, s, a, a + tw, a + 2 * tw, a + 3 * tw, tw)
            oy = 2 * (ty0 + y) + i
            if oy < oh:
                for tx in range(tw):
                    row[u(2 * tx)] = y2[u(2 * i * tw + tx)]
                    row[u(2 * tx + 1)] = y2[u((2 * i + 1) * tw + tx)]
                d = ((n * o_n + o) * oh + oy) * ow
                epilogue_run(of, d, ow, row, 0, bv, rf, act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**SEQ)
def winograd_conv2d(x, up, bias, residual, out, pt, pl, act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv2d(x, 3x3 weight, stride 1, padding top pt / left pl) + bias) + residual),
    up = pack_transformed(weight); bias may be None, residual None or empty for none."""
    n_n, c_n, h, w = x.shape
    o_n, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    n_mb = up.shape[1]
    o_rows = n_mb * MR  # the products' rows: the output channels, padded to whole panels
    nr = panel_width()
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    rows = max(1, min(th, RUN_BYTES // (64 * max(c_n, o_rows) * tw)))
    ld_max = -(-rows * tw // nr) * nr
    vbuf = np.empty(16 * c_n * ld_max, np.float32)
    mbuf = np.empty(16 * o_rows * ld_max, np.float32)
    xf, uf, of = x.reshape(-1), up.reshape(-1), out.reshape(-1)
    rf = residual_run(residual, out)
    n_o, mbb = blocks(16, n_mb, MIN_PANELS)
    for n in range(n_n):
        for ty0 in range(0, th, rows):
            tc = min(rows, th - ty0) * tw
            ld = -(-tc // nr) * nr  # v's and m's rows: the run's tiles, padded to whole panels
            vf, mf = vbuf[:16 * c_n * ld], mbuf[:16 * o_rows * ld]
            run_tasks(_input_task, c_n, (xf, n * c_n * h * w, h, w, pt, pl, ty0, tw, tc, vf, c_n * ld, ld))
            run_tasks(_products_task, 16 * n_o, (uf, vf, mf, n_o, mbb, n_mb, c_n, ld))
            run_tasks(_output_task, o_n, (mf, o_rows * ld, ld, tc, of, (o_n, oh, ow), n, ty0, tw, bias, rf,
                                          act, alpha, beta, post, post_alpha, post_beta))
