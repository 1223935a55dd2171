"""Convolutions (conv2d, fused_conv2d, conv_transpose2d) and explicit padding (pad), NCHW.

conv2d picks one of two kernels; both apply the epilogue of ir/ops/fused.py (bias,
activation, residual, post-activation) in a pass over their output:
- depthwise (groups == input channels): a direct loop, parallel over (image, channel),
  its inner loop running along an output row, epilogue fused per row;
- everything else: one GEMM per image and group in OpenBLAS (np.dot). A 1x1 stride-1
  unpadded conv multiplies the input viewed as (C, H*W) directly; other convs first
  copy their windows into a (C*KH*KW, OH*OW) scratch (im2col, parallel). The GEMM
  writes the output, then one parallel pass applies the epilogue in place.
np.dot is never called inside prange: OpenBLAS runs its own threads.
padding_mode reflect/replicate/circular pads into a scratch first.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from codegen.kernels.gemm import NO_EPILOGUE, epilogue, epilogue_args, epilogue_row
from codegen.registry import Emit, emits, lit
from ir.ops.conv import _pad_pairs

_PAR = {"cache": True, "nogil": True, "parallel": True, "error_model": "numpy"}
_SEQ = {"cache": True, "nogil": True, "error_model": "numpy"}

# conv padding_mode or pad mode -> kernel code
PAD_CODES = {"zeros": 0, "constant": 0, "reflect": 1, "replicate": 2, "circular": 3}


# -- padding ---------------------------------------------------------------------------------

@numba.njit(inline="always", **_SEQ)
def _source(j, n, mode):
    """The index in [0, n) that padded position j reads, or -1 where the constant goes."""
    if j >= 0 and j < n:
        return j
    if mode == 0:
        return -1
    if mode == 1:  # reflect (pads are shorter than n)
        return -j if j < 0 else 2 * (n - 1) - j
    if mode == 2:  # replicate
        return 0 if j < 0 else n - 1
    return j % n  # circular


@numba.njit(**_PAR)
def pad5(x, out, before, crop, kept, mode, value):
    """Pad the last four dims of x (L, A, B, C, D) into out. Along each dim, out index i
    reads the cropped input at i - before (mapped into [0, kept) by mode), which is x
    index + crop (negative pads crop)."""
    _, a_n, b_n, c_n, d_n = out.shape
    gd, kd = before[3], kept[3]
    for r in prange(out.shape[0] * a_n * b_n * c_n):
        c = r % c_n
        b = (r // c_n) % b_n
        a = (r // (c_n * b_n)) % a_n
        lead = r // (c_n * b_n * a_n)
        dst = out[lead, a, b, c]
        sa = _source(a - before[0], kept[0], mode)
        sb = _source(b - before[1], kept[1], mode)
        sc = _source(c - before[2], kept[2], mode)
        if sa < 0 or sb < 0 or sc < 0:
            for d in range(d_n):
                dst[d] = value
            continue
        src = x[lead, sa + crop[0], sb + crop[1], sc + crop[2]]
        for d in range(gd, gd + kd):
            dst[d] = src[d - gd + crop[3]]
        for d in range(gd):
            s = _source(d - gd, kd, mode)
            dst[d] = value if s < 0 else src[s + crop[3]]
        for d in range(gd + kd, d_n):
            s = _source(d - gd, kd, mode)
            dst[d] = value if s < 0 else src[s + crop[3]]


# -- conv2d ------------------------------------------------------------------------------------

@numba.njit(inline="always", **_SEQ)
def _u(i):
    """An index as unsigned: numba then skips the negative-index wraparound, so loops vectorise."""
    return numba.uint64(i)


@numba.njit(inline="always", **_SEQ)
def _span(off, stride, n_in, n_out):
    """[lo, hi): the outputs o whose input o * stride + off lies in [0, n_in)."""
    lo = min(n_out, max(0, (stride - 1 - off) // stride))
    hi = max(lo, min(n_out, (n_in - off + stride - 1) // stride))
    return lo, hi


@numba.njit(**_PAR)
def _phases(x, n, c0, xq, pt, pl):
    """Zero-pad x[n, c0:c0+Cg] and split it by stride phase: xq (SH, SW, Cg, HQ, WQ) holds
    xq[a, b, c, y, z] = x[n, c0 + c, y*SH + a - pt, z*SW + b - pl] (0 outside x). Every
    window row of a strided conv is then a contiguous run of one phase plane."""
    sh, sw, cg, hq, wq = xq.shape
    c_n, h, w = x.shape[1], x.shape[2], x.shape[3]
    xf, qf = x.reshape(-1), xq.reshape(-1)
    for t in prange(sh * sw * cg):
        a, b, c = t // (sw * cg), (t // cg) % sw, t % cg
        lo, hi = _span(b - pl, sw, w, wq)
        src0 = ((n * c_n + c0 + c) * h) * w + b - pl
        for y in range(hq):
            iy = y * sh + a - pt
            d = _u(t * hq * wq + y * wq)
            if iy < 0 or iy >= h:
                for z in range(wq):
                    qf[d + _u(z)] = 0
                continue
            src = src0 + iy * w
            for z in range(lo):
                qf[d + _u(z)] = 0
            if sw == 1:
                for z in range(lo, hi):
                    qf[d + _u(z)] = xf[_u(src + z)]
            else:
                for z in range(lo, hi):
                    qf[d + _u(z)] = xf[_u(src + z * sw)]
            for z in range(hi, wq):
                qf[d + _u(z)] = 0


@numba.njit(**_PAR)
def _im2col(xq, cols, kh, kw, dh, dw, ow_n):
    """cols[(c*KH + i)*KW + j, oy*OW + ox] = padded x[c, oy*SH + i*dh, ox*SW + j*dw], read from
    the phase planes xq of _phases: contiguous copies, no bounds checks."""
    sh, sw, cg, hq, wq = xq.shape
    p_n = cols.shape[1]
    oh_n = p_n // ow_n
    qf, cf = xq.reshape(-1), cols.reshape(-1)
    for r in prange(cols.shape[0]):
        j, i, c = r % kw, (r // kw) % kh, r // (kw * kh)
        a, qi, b, qj = (i * dh) % sh, (i * dh) // sh, (j * dw) % sw, (j * dw) // sw
        src = _u(((((a * sw + b) * cg + c) * hq + qi) * wq) + qj)
        dst = _u(r * p_n)
        for _ in range(oh_n):
            for ox in range(ow_n):
                cf[dst + _u(ox)] = qf[src + _u(ox)]
            src += _u(wq)
            dst += _u(ow_n)


@numba.njit(**_PAR)
def _subsample(x, n, c0, cols, sh, sw, ow_n):
    """cols[c, oy*OW + ox] = x[n, c0 + c, oy*SH, ox*SW]: the input of a 1x1 strided conv as a matrix."""
    oh_n = cols.shape[1] // ow_n
    for c in prange(cols.shape[0]):
        for oy in range(oh_n):
            row = x[n, c0 + c, oy * sh]
            for ox in range(ow_n):
                cols[c, oy * ow_n + ox] = row[ox * sw]


@numba.njit(**_SEQ)
def _conv_gemm(x, weight, out, sh, sw, pt, pl, pb, pr, dh, dw, groups):
    """out = conv(x, weight) without bias: im2col (unless 1x1 stride 1) + one GEMM per image and group."""
    n_n, c_n, h, w = x.shape
    o_n, cg, kh, kw = weight.shape
    oh, ow = out.shape[2], out.shape[3]
    og, k = o_n // groups, cg * kh * kw
    w2 = weight.reshape((o_n, k))
    direct = kh == 1 and kw == 1 and sh == 1 and sw == 1 and pt == 0 and pl == 0 and oh == h and ow == w
    # a 1x1 conv without padding (ResNet's stride-2 downsample): subsample, then one GEMM
    pointwise = kh == 1 and kw == 1 and pt + pl + pb + pr == 0 and not direct
    cols = np.empty((0 if direct else k, oh * ow), x.dtype)
    hq, wq = -(-(h + pt + pb) // sh), -(-(w + pl + pr) // sw)
    xq = np.empty((0, 0, 0, 0, 0) if direct or pointwise else (sh, sw, cg, hq, wq), x.dtype)
    for n in range(n_n):
        y = out[n].reshape((o_n, oh * ow))
        for g in range(groups):
            if direct:
                np.dot(w2[g * og:(g + 1) * og], x[n].reshape((c_n, h * w))[g * cg:(g + 1) * cg], y[g * og:(g + 1) * og])
            elif pointwise:
                _subsample(x, n, g * cg, cols, sh, sw, ow)
                np.dot(w2[g * og:(g + 1) * og], cols, y[g * og:(g + 1) * og])
            else:
                _phases(x, n, g * cg, xq, pt, pl)
                _im2col(xq, cols, kh, kw, dh, dw, ow)
                np.dot(w2[g * og:(g + 1) * og], cols, y[g * og:(g + 1) * og])


@numba.njit(**_PAR)
def _conv_depthwise(x, weight, bias, residual, out, sh, sw, pt, pl, dh, dw,
                    act, alpha, beta, post, post_alpha, post_beta):
    """groups == C: output channel o reads input channel o // (O / C). Epilogue fused per row."""
    n_n, c_n, h, w = x.shape
    o_n, _, kh, kw = weight.shape
    oh_n, ow_n = out.shape[2], out.shape[3]
    mult = o_n // c_n
    for t in prange(n_n * o_n):
        n, o = t // o_n, t % o_n
        xc, wo = x[n, o // mult], weight[o, 0]
        bv = np.float32(0.0) if bias is None else np.float32(bias[o])
        for oy in range(oh_n):
            row = out[n, o, oy]
            row[:] = 0
            for i in range(kh):
                iy = oy * sh - pt + i * dh
                if iy < 0 or iy >= h:
                    continue
                src = xc[iy]
                for j in range(kw):
                    wv, off = wo[i, j], j * dw - pl
                    lo, hi = _span(off, sw, w, ow_n)
                    if sw == 1:
                        for ox in range(lo, hi):
                            row[ox] += wv * src[ox + off]
                    else:
                        for ox in range(lo, hi):
                            row[ox] += wv * src[ox * sw + off]
            if residual is None:
                epilogue_row(row, bv, None, act, alpha, beta, post, post_alpha, post_beta)
            else:
                epilogue_row(row, bv, residual[n, o, oy], act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**_SEQ)
def _conv_body(x, weight, bias, residual, out, sh, sw, pt, pl, pb, pr, dh, dw, groups,
               act, alpha, beta, post, post_alpha, post_beta):
    n_n, c_n = x.shape[0], x.shape[1]
    if groups == c_n and weight.shape[1] == 1 and groups > 1:
        _conv_depthwise(x, weight, bias, residual, out, sh, sw, pt, pl, dh, dw,
                        act, alpha, beta, post, post_alpha, post_beta)
        return
    _conv_gemm(x, weight, out, sh, sw, pt, pl, pb, pr, dh, dw, groups)
    if bias is not None or residual is not None or act != 0 or post != 0:
        o_n, p_n = out.shape[1], out.shape[2] * out.shape[3]
        y = out.reshape((n_n * o_n, p_n))
        if residual is None:
            epilogue(y, bias, None, True, act, alpha, beta, post, post_alpha, post_beta)
        else:
            epilogue(y, bias, residual.reshape((n_n * o_n, p_n)), True, act, alpha, beta, post, post_alpha, post_beta)


@numba.njit(**_SEQ)
def conv2d(x, weight, bias, residual, out, stride, padding, dilation, groups, pad_mode,
           act, alpha, beta, post, post_alpha, post_beta):
    """out = post(act(conv2d(x, weight) + bias) + residual); bias and residual may be None.
    padding: (top, left, bottom, right); pad_mode: a PAD_CODES value."""
    n_n, c_n, h, w = x.shape
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = stride, padding, dilation
    if pad_mode != 0 and pt + pl + pb + pr > 0:
        xp = np.empty((n_n, c_n, h + pt + pb, w + pl + pr), x.dtype)
        pad5(x.reshape((1, n_n, c_n, h, w)), xp.reshape((1,) + xp.shape), (0, 0, pt, pl), (0, 0, 0, 0),
             (n_n, c_n, h, w), pad_mode, 0.0)
        _conv_body(xp, weight, bias, residual, out, sh, sw, 0, 0, 0, 0, dh, dw, groups,
                   act, alpha, beta, post, post_alpha, post_beta)
    else:
        _conv_body(x, weight, bias, residual, out, sh, sw, pt, pl, pb, pr, dh, dw, groups,
                   act, alpha, beta, post, post_alpha, post_beta)


# -- conv_transpose2d ----------------------------------------------------------------------------

@numba.njit(**_PAR)
def _col2im(cols, out, n, o0, bias, kh, kw, sh, sw, pt, pl, dh, dw, w_in):
    """out[n, o0 + o] = bias + the scatter-add of every tap: cols[(o*KH + i)*KW + j, iy*W + ix]
    lands at (iy*sh - pt + i*dh, ix*sw - pl + j*dw). Parallel over output channels (no races)."""
    og, p_in = cols.shape[0] // (kh * kw), cols.shape[1]
    h_in = p_in // w_in
    oh_n, ow_n = out.shape[2], out.shape[3]
    cf = cols.reshape(-1)
    for o in prange(og):
        y = out[n, o0 + o].reshape(-1)
        bv = 0.0 if bias is None else bias[o0 + o]
        for k in range(oh_n * ow_n):
            y[k] = bv
        for i in range(kh):
            for j in range(kw):
                src = ((o * kh + i) * kw + j) * p_in
                off = j * dw - pl
                lo, hi = _span(off, sw, ow_n, w_in)
                for iy in range(h_in):
                    oy = iy * sh - pt + i * dh
                    if oy < 0 or oy >= oh_n:
                        continue
                    s, d = src + iy * w_in, oy * ow_n + off
                    for ix in range(lo, hi):
                        y[_u(d + ix * sw)] += cf[_u(s + ix)]


@numba.njit(**_SEQ)
def conv_transpose2d(x, weight, bias, out, stride, padding, dilation, groups):
    """out = conv_transpose2d(x, weight) + bias (bias may be None); weight (C, O/groups, KH, KW).
    One GEMM per image and group gives every (tap, input pixel) product, then a scatter-add."""
    n_n, c_n, h, w = x.shape
    og, kh, kw = weight.shape[1], weight.shape[2], weight.shape[3]
    (sh, sw), (pt, pl, _, _), (dh, dw) = stride, padding, dilation
    cg = c_n // groups
    w2 = weight.reshape((c_n, og * kh * kw))
    cols = np.empty((og * kh * kw, h * w), x.dtype)
    for n in range(n_n):
        xn = x[n].reshape((c_n, h * w))
        for g in range(groups):
            np.dot(w2[g * cg:(g + 1) * cg].T, xn[g * cg:(g + 1) * cg], cols)
            _col2im(cols, out, n, g * og, bias, kh, kw, sh, sw, pt, pl, dh, dw, w)


# -- emit rules ----------------------------------------------------------------------------------

@emits("conv2d", "fused_conv2d")
def _emit_conv2d(e: Emit) -> list[str]:
    a = e.node.attrs
    bias = e.args[2] if len(e.args) > 2 else "None"
    residual = e.args[3] if len(e.args) > 3 else "None"
    act = epilogue_args(a) if e.node.op == "fused_conv2d" else NO_EPILOGUE
    return [f"{e.call(conv2d)}({e.args[0]}, {e.args[1]}, {bias}, {residual}, {e.outs[0]}, {lit(a['stride'])}, "
            f"{lit(a['padding'])}, {lit(a['dilation'])}, {a['groups']}, {PAD_CODES[a['padding_mode']]}, {act})"]


@emits("conv_transpose2d")
def _emit_conv_transpose2d(e: Emit) -> list[str]:
    a = e.node.attrs
    bias = e.args[2] if len(e.args) > 2 else "None"
    return [f"{e.call(conv_transpose2d)}({e.args[0]}, {e.args[1]}, {bias}, {e.outs[0]}, {lit(a['stride'])}, "
            f"{lit(a['padding'])}, {lit(a['dilation'])}, {a['groups']})"]


@emits("pad")
def _emit_pad(e: Emit) -> list[str]:
    a = e.node.attrs
    shape, out = e.node.inputs[0].type.shape, e.node.outputs[0].type.shape
    pairs = _pad_pairs(len(shape), a["pads"])
    if len(shape) > 4 and any(any(p) for p in pairs[:-4]):
        raise NotImplementedError(f"pad of more than 4 trailing dims ({e.node.name})")
    lead = math.prod(shape[:-4])
    shape4, out4 = (1,) * (4 - len(shape)) + shape[-4:], (1,) * (4 - len(out)) + out[-4:]
    pairs4 = [(0, 0)] * (4 - len(pairs)) + pairs[-4:]
    before = tuple(max(b, 0) for b, _ in pairs4)
    crop = tuple(max(-b, 0) for b, _ in pairs4)
    kept = tuple(n - max(-b, 0) - max(-f, 0) for n, (b, f) in zip(shape4, pairs4))
    value = float(a["value"]) if e.node.inputs[0].type.dtype.startswith("float") else int(a["value"])
    return [f"{e.call(pad5)}({e.args[0]}.reshape({lit((lead,) + shape4)}), {e.outs[0]}.reshape({lit((lead,) + out4)}), "
            f"{lit(before)}, {lit(crop)}, {lit(kept)}, {PAD_CODES[a['mode']]}, {lit(value)})"]
