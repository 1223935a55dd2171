"""How far a correct float32 computation may be from the exact answer, output element by output element.

    y, sigma = float64_with_error_scale(module, x)   # torch module, numpy input(s)
    check_float32(got, y, sigma, "resnet18 numba")    # raises AssertionError naming the worst element

Comparing one float32 implementation with another (torch eager, on whatever CPU runs the tests)
ties the tolerance to how lucky the other's rounding was on that CPU: torch's AVX-512 and AVX2
kernels round differently, and a rule like "our error is at most twice torch's" fails on one ISA
and passes on another. Here the reference is the model evaluated in float64 (exact to ~1e-16
relative, far below float32's u = 2^-24), and the tolerance of each element is derived from the
computation that produces it.

The error model (first order, statistical)
-------------------------------------------
A float32 evaluation differs from the exact result by the sum of the rounding errors of its
operations, each carried to the output by the derivative of the rest of the network. We model:

1. every operation's result is rounded: a relative error uniform in [-u, u], variance u^2 / 3;
2. every accumulation (convolution, linear / matmul, mean) of terms t_j additionally errs by
   about u * M, M = sum_j |t_j| = (|W| |x|) at that element, with variance u^2 M^2 / 3. A sum
   is rounded relative to its partial sums, and M bounds those (Wilkinson's bound is
   gamma_n * M, n * u * M; summing in blocks, as BLAS, oneDNN and our kernels all do, the
   observed error stays near u * M without the factor n). Using M rather than sqrt(sum t_j^2)
   matters: on the all-positive image input of YOLOv5's first conv the terms share a sign per
   filter, the partial sums drift, and the error was up to 20x the sqrt(sum t_j^2) estimate.
   Average pooling is the exception: pooling kernels (torch's, ours) add a window's n terms one
   after another; the n - 1 partial sums and the division by d each round by up to u M / d at
   the output, variance (n + 1) u^2 M^2 / (3 d^2). (Modelled as one u M / d, the error of
   torch's float32 adaptive pooling of 100-term windows of positive terms was 3.5 sigma in root
   mean square and 11 at worst; modelled so, 0.9 and 3.)
3. errors are carried forward to first order and independent ones add in variance: through a
   linear layer var_out = W^2 var_in (not |W| times a bound: that grows like sqrt(fan_in) per
   layer and is useless after a few layers), through f elementwise f'(x)^2 var_in, softmax and
   layer norm by their Jacobians, and data movement (views, cat, pooling by max, nearest
   upsampling) moves the variance with the value: as_strided (torch restrides a channels-last
   global pool's output in place) by storage position, and a write in place through one view
   of a storage reaches its other views (_ErrorScale's docstring).

The float64 forward runs under a TorchDispatchMode that computes, beside every aten op's value,
the variance of its float32 error (rules in _ErrorScale.rule; an op without a rule raises, so a
new zoo model says which rule it needs). sigma = sqrt(variance) is the scale of the error a
correct float32 implementation makes at each output element: where the output is badly
conditioned (YOLOv5's box decode: (2 sigmoid(t))^2 * anchor, with |t| in the hundreds after
activations grow through the net) sigma is large, where it is well conditioned (class scores)
sigma is small, and the check is tight there.

The check
---------
    |got - y| <= K * sigma + u * |y| + TINY          per element, K = 16, TINY = 2^-100

K: the error at one element is a sum of many small roundings, roughly normal with a standard
deviation near sigma, and the largest of the up to 8.6e6 elements of an output (YOLOv5s, batch 4)
is then 5 to 6 sigma out. sigma is an estimate: it ignores correlations between roundings and
how each kernel blocks its sums (the measured root mean square of error / sigma is 0.3 to 0.6,
but 1.1 to 1.7 on EfficientNet-B0). Measured, the worst |got - y| / sigma over every output
element of the zoo at batch 1 and 4 is, for ours (numba and interpreter): YOLOv5s 4.0,
transformer_block 2.4, unet_small 2.3, mobilenet_v2 2.1, tiny_cnn 1.5, resnet18 1.4, resnet50
1.2, mlp 1.2; for the interpreter on the later architectures: efficientnet_b0 4.9, densenet121
1.5, convnext_tiny 1.5, alexnet 0.8; for torch's own float32 (AVX2) at most 7.1 (EfficientNet-B0;
YOLOv5s 4.6). K = 16 leaves a factor 3.3 over ours (2.3 over torch's on EfficientNet-B0) for
other CPUs and inputs.
u * |y|: rounding the exact result to float32 (up to half an ulp, u relative) is unavoidable.
TINY: float32 kernels flush results far below anything of interest to zero (torch's float32
silu(-88.7) is -0, the exact value -2.6e-37: exp(88.7) overflowed); 2^-100 = 7.9e-31.

A small real bug is far outside: one weight changed by a relative 1e-3 moves outputs by 73 sigma
(ResNet-18's stem conv or classifier), 450 sigma (YOLOv5s' stem) and 5900 sigma (a YOLOv5s anchor)
(tests/test_zoo.py::test_check_rejects_a_weight_off_by_1e_3).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakTensorKeyDictionary

U = 2.0 ** -24  # unit roundoff of float32
K = 16.0
TINY = 2.0 ** -100

# Variances are float32 (half the time of float64 in the convolutions that carry them), scaled
# by 2^100, and each term is formed as the square of a product of standard deviations (never a
# product of squares), so that those of outputs down to ~1e-30 neither underflow nor overflow.
_SCALE = 2.0 ** 100
_ROUND = U * U / 3 * _SCALE  # variance of a relative rounding error uniform in [-u, u], scaled
_ROUND_SD = math.sqrt(_ROUND)
_ACC_SD = math.sqrt(2) * _ROUND_SD  # an accumulation's u M, and rounding its result (|y| <= M)
_aten = torch.ops.aten

# ops that only move or copy values (or zero some: tril, triu): the variance moves the same way
_DATA = {
    "view", "_unsafe_view", "reshape", "t", "permute", "transpose", "expand", "split", "split_with_sizes",
    "clone", "contiguous", "cat", "stack", "upsample_nearest1d", "upsample_nearest2d", "squeeze", "unsqueeze",
    "flatten", "select", "slice", "alias", "detach", "unbind", "constant_pad_nd", "index_select", "unfold",
    "index", "roll", "channel_shuffle", "unsafe_split", "unsafe_split_with_sizes", "tril", "triu",
}
# elementwise ops that torch does not tag pointwise (hardsigmoid is tagged, hardswish is not)
_POINTWISE_UNTAGGED = {"hardswish"}
_FACTORY = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
            "arange", "scalar_tensor", "lift_fresh", "lift_fresh_copy"}


class _ErrorScale(TorchDispatchMode):
    """Beside every float64 value, the variance (float32) of a float32 evaluation's error in it.

    In place, an op whose out-of-place form returns a view (as_strided_, transpose_, unsqueeze_)
    restrides the tensor itself, which takes the view's variance; any other (relu_, add_, copy_)
    writes its out-of-place result into the tensor.

    Aliasing: a view's variance is computed by the view's rule when the view is made. A later
    write in place through any alias of the same storage (add_ on the base, relu_ on a slice of
    it, copy_ into a slice) would leave the other aliases' variances stale, so every variance is
    stamped with when it was set, a write through a view also updates its base (torch's _base,
    the tensor that owns the storage), and a view whose base was written after its own variance
    was set takes the base's instead, element by element through their storage positions.
    """

    def __init__(self):
        super().__init__()
        self.var = WeakTensorKeyDictionary()  # tensor -> (stamp, variance)
        self.stamp = itertools.count()

    def get(self, t):
        if not (isinstance(t, torch.Tensor) and t.is_floating_point()):
            return None
        own = self.var.get(t)
        base = _base(t)
        if base is not None:
            of_base = self.var.get(base)
            if of_base is not None and (own is None or of_base[0] > own[0]):
                return _restride(base, of_base[1], t.size(), t.stride(), t.storage_offset())
        return None if own is None else own[1]

    def get_or_zero(self, t):
        v = self.get(t)
        return torch.zeros(t.shape, dtype=torch.float32) if v is None else v

    def set(self, t, v, stamp=None):
        if v is None:
            self.var.pop(t, None)
        else:
            self.var[t] = (next(self.stamp) if stamp is None else stamp, v)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name.endswith("_") and not name.startswith("_"):  # in place (relu_, add_, as_strided_)
            outplace = _out_of_place(func, name[:-1])
            y = outplace(*args, **kwargs)
            v = self.rule(outplace, name[:-1], args, kwargs, y)
            x = args[0]
            if _returns_alias(outplace):
                # a view op in place (as_strided_, transpose_, unsqueeze_): y is x's storage with
                # the new sizes and strides, which x itself now takes; the values do not change
                func(*args, **kwargs)
                self.set(x, v)
                return x
            # as relu, silu, add, whose result is written into x (and so into x's base)
            base = _base(x)
            tracked = self.get(x) is not None or (base is not None and self.get(base) is not None)
            x.copy_(y)
            if v is None:
                if not (tracked and x.is_floating_point()):
                    self.set(x, None)
                    return x
                v = torch.zeros(x.shape, dtype=torch.float32)  # exact now, and so in its base
            stamp = next(self.stamp)
            self.set(x, v, stamp)
            if base is not None:
                self.set(base, _restride(x, v, base.size(), base.stride(), base.storage_offset(),
                                         under=(base, self.get_or_zero(base))), stamp)
            return x
        y = _depthwise_conv64(*args) if name == "convolution" and _is_depthwise64(*args) else func(*args, **kwargs)
        v = self.rule(func, name, args, kwargs, y)
        if isinstance(y, torch.Tensor):
            if v is not None:
                self.set(y, v)
        elif v is not None:
            for yi, vi in zip(y, v):
                if vi is not None:
                    self.set(yi, vi)
        return y

    def _any_var(self, items) -> bool:
        return any(self._any_var(a) if isinstance(a, (list, tuple)) else self.get(a) is not None for a in items)

    def _as_var(self, a):
        if isinstance(a, (list, tuple)):
            return type(a)(self._as_var(e) for e in a)
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return self.get_or_zero(a)
        return a

    def rule(self, func, name, args, kwargs, y):  # noqa: C901 - one branch per kind of op
        if name in _FACTORY:
            return None
        if name in _DATA:
            if not self._any_var(list(args) + list(kwargs.values())):
                return None
            if func in (_aten.view.default, _aten._unsafe_view.default):
                # a variance need not be laid out as its value (a rule's result is laid out as its
                # operands: layer norm's of a permuted input is permuted, its value contiguous), so
                # a view of the value may need a copy of the variance
                func = _aten.reshape.default
            return func(*self._as_var(args), **{k: self._as_var(a) for k, a in kwargs.items()})
        if name == "as_strided":  # any sizes, strides and offset: by storage position
            x = args[0]
            vx = self.get(x)
            if vx is None:
                return None
            base = _base(x)
            vbase = None if base is None else self.get(base)
            under = None if vbase is None else (base, vbase)
            return _restride(x, vx, y.size(), y.stride(), y.storage_offset(), under=under)
        if name == "copy":  # copy(self, src): src's values (broadcast) in self's place
            vs = self.get(args[1])
            return None if vs is None else vs.expand(y.shape).contiguous()
        if name in ("avg_pool2d", "avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d"):
            # out = (sum of the window's n terms) / d; d: the kernel's size, n, or divisor_override.
            # Pooling kernels (torch's, ours) add a window's terms one after another, not in
            # blocks: n - 1 partial sums round, each by up to u M (M = sum_j |t_j|), then the
            # division (and 1 / d) by up to u |y| <= u M / d: variance (n + 1) u^2 / 3 (M / d)^2,
            # M / d = pool(|x|). Carried: sum_j var_j / d^2 = pool(var) / d.
            x = args[0]
            if name.startswith("avg"):  # pool(1) = n / d; with divisor_override 1: n
                params = _with_defaults(func, args, kwargs)
                ones = torch.ones(x.shape, dtype=torch.float32)
                n = func(ones, *params[1:-1], 1)
                inv_d = func(ones, *params[1:]).div_(n)
            else:  # along a dim of m elements, output i averages [floor(i m / o), ceil((i + 1) m / o))
                out_size = args[1]
                n = torch.ones((), dtype=torch.float32)
                for k, (m, o) in enumerate(zip(x.shape[-len(out_size):], out_size)):
                    i = torch.arange(o)
                    n_k = ((i + 1) * m + o - 1) // o - i * m // o
                    n = n * n_k.float().view((o,) + (1,) * (len(out_size) - 1 - k))
                inv_d = 1 / n
            v = func(x.float().abs_(), *args[1:], **kwargs).mul_((n + 1).sqrt_() * _ROUND_SD).square_()
            vx = self.get(x)
            if vx is not None:
                v += func(vx, *args[1:], **kwargs).mul_(inv_d)
            return v
        if name == "_to_copy":
            v = self.get(args[0])
            return None if v is None or not y.is_floating_point() else v
        if name == "max_pool2d_with_indices":
            out, idx = y
            v = self.get(args[0])
            if v is None:
                return None
            return v.flatten(-2).gather(-1, idx.flatten(-2)).view(out.shape), None
        if name == "convolution":
            x, w = args[0], args[1]
            rest = args[3:]
            v = _aten.convolution(x.float().abs_(), w.float().abs_(), None, *rest).mul_(_ACC_SD).square_()
            vx = self.get(x)
            if vx is not None:
                v += _aten.convolution(vx, w.float().square_(), None, *rest)
            return v
        if name in ("mm", "bmm", "addmm"):
            if name == "addmm":
                bias, a, b = args[:3]
                beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
            else:
                (a, b), bias, beta, alpha = args[:2], None, 1, 1
            mm = _aten.bmm if name == "bmm" else _aten.mm
            v = mm(a.float().abs_(), b.float().abs_()).mul_(_ACC_SD).square_()
            va, vb = self.get(a), self.get(b)
            if va is not None:
                v += mm(va, b.float().square_())
            if vb is not None:
                v += mm(a.float().square_(), vb)
            v *= alpha * alpha
            if bias is not None and self.get(bias) is not None:
                v += beta * beta * self.get(bias)
            return v
        if name in ("mean", "sum"):
            x = args[0]
            n = x.numel() / max(y.numel(), 1)
            v = func(x.float().abs_(), *args[1:], **kwargs).mul_(_ACC_SD).square_()
            vx = self.get(x)
            if vx is not None:
                v += func(vx, *args[1:], **kwargs).mul_(1 / n) if name == "mean" else func(vx, *args[1:], **kwargs)
            return v
        if name in ("native_batch_norm", "_native_batch_norm_legit_no_training"):
            # eval: (x - mean) * scale + bias; x - mean rounds relative to |x| + |mean| (folded into
            # the conv before it, as pnnx and our compiler do, the folded weights' rounding is of
            # the same size), then the result rounds
            if name == "native_batch_norm":
                x, w, b, mean, var, training, _, eps = args
                if training:
                    raise NotImplementedError("batch norm in training mode")
            else:
                x, w, b, mean, var, _, eps = args
            shape = (1, -1) + (1,) * (x.dim() - 2)
            scale = ((1 if w is None else w) / torch.sqrt(var + eps)).view(shape).float().abs_()
            v = x.float().abs_().add_(mean.view(shape).float().abs()).mul_(scale * _ROUND_SD).square_()
            vx = self.get(x)
            if vx is not None:
                v += vx * scale.square()
            return v.add_(y[0].float().mul_(_ROUND_SD).square_()), None, None
        if name == "native_layer_norm":
            x, normalized_shape, w, b, eps = args
            out, mean, rstd = (t.float() for t in y)
            dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
            n = math.prod(normalized_shape)
            xf = x.float()
            xhat = (xf - mean) * rstd
            wabs = 1 if w is None else w.float().abs()
            g = rstd * wabs
            # the mean and variance are sums of n terms (magnitude |x| and xhat^2), then
            # (x - mean) * rstd * w + b: a few roundings relative to |x|, |xhat| and |out|
            v = ((xf.abs() + mean.abs()).mul_(g * _ACC_SD).square_()
                 + (xhat.abs() * wabs).mul_(2 * _ROUND_SD).square_() + out.mul(_ROUND_SD).square_())
            vx = self.get(x)
            if vx is not None:  # the Jacobian rstd * w * (I - 1/n - xhat xhat^T / n), by rows
                v += (vx + vx.mean(dims, keepdim=True) * (1 + xhat.square()) / n).sqrt_().mul_(g).square_()
            return v, None, None
        if name in ("_softmax", "_log_softmax", "_safe_softmax"):
            x, dim = args[0], args[1]
            y32 = y.float()
            p = y32 if name != "_log_softmax" else y32.exp()
            vx = self.get_or_zero(x).masked_fill(x.isinf(), 0)  # -inf (masked out): p = 0 exactly
            # d p_i = p_i (d x_i - sum_j p_j d x_j); log_softmax: d x_i - sum_j p_j d x_j
            v = ((1 - 2 * p) * vx + (p.square() * vx).sum(dim, keepdim=True)).clamp_(min=0)
            if name != "_log_softmax":
                v = v.sqrt_().mul_(p).square_()
            return v + y32.mul(2 * _ROUND_SD).square_()  # exp, the sum, the division (or log)
        if torch.Tag.pointwise in func.tags or name in _POINTWISE_UNTAGGED:
            if not (isinstance(y, torch.Tensor) and y.is_floating_point()):
                return None
            v = y.float().mul_(_ROUND_SD).square_()
            for i, a in enumerate(args):
                va = self.get(a)
                if va is not None:
                    v += _derivative(func, name, args, kwargs, i, y).mul_(va.sqrt()).square_()
            return v
        raise NotImplementedError(f"tests/numerics.py has no rounding-error rule for {func}")


def _out_of_place(func, name: str):
    """The overload of aten.<name> that func (aten.<name>_) computes in place: the one of the same
    overload name, else of the same arguments (transpose_.default: transpose.int)."""
    packet = getattr(_aten, name)
    if func._overloadname in packet.overloads():
        return getattr(packet, func._overloadname)
    arguments = [a.name for a in func._schema.arguments]
    for overload in packet.overloads():
        if [a.name for a in getattr(packet, overload)._schema.arguments] == arguments:
            return getattr(packet, overload)
    raise NotImplementedError(f"tests/numerics.py: no out-of-place form of {func}")


def _returns_alias(op) -> bool:
    """Whether op's result is a view of its first argument (its schema: "-> Tensor(a)")."""
    returns = op._schema.returns
    return len(returns) == 1 and returns[0].alias_info is not None and not returns[0].alias_info.is_write


def _base(t: torch.Tensor) -> torch.Tensor | None:
    """The tensor that t is a view of (torch's _base: the one owning the storage), or None."""
    base = t._base
    if base is not None and base.dtype != t.dtype:
        raise NotImplementedError(f"tests/numerics.py: a {t.dtype} view of a {base.dtype} tensor")
    return base


def _storage_positions(t: torch.Tensor, size, stride, offset) -> torch.Tensor:
    """The storage index of each element of the view (size, stride, offset) of t's storage."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return torch.arange(n).as_strided(size, stride, offset)


def _restride(x: torch.Tensor, vx: torch.Tensor, size, stride, offset, under=None) -> torch.Tensor:
    """The variances of the view (size, stride, offset) of x's storage, given x's variances vx:
    each element takes the variance of the element of x at the same storage position; positions
    x does not cover take those of under = (tensor on the same storage, its variances), if any.
    A position neither covers has no known variance: NotImplementedError."""
    n = x.untyped_storage().nbytes() // x.element_size()
    buf, known = torch.zeros(n, dtype=torch.float32), torch.zeros(n, dtype=torch.bool)
    for t, vt in ([under] if under is not None else []) + [(x, vx)]:
        at = _storage_positions(t, t.size(), t.stride(), t.storage_offset()).reshape(-1)
        buf[at], known[at] = vt.expand(t.shape).reshape(-1), True
    at = _storage_positions(x, size, stride, offset)
    if not known[at].all():
        raise NotImplementedError("tests/numerics.py: a strided view reaching storage of unknown variance")
    return buf[at]


def _with_defaults(func, args, kwargs) -> list:
    """func's arguments, all positional, defaults filled in from its schema."""
    params = func._schema.arguments
    return [args[i] if i < len(args) else kwargs.get(p.name, p.default_value) for i, p in enumerate(params)]


def _is_depthwise64(x, w, b, stride, padding, dilation, transposed, output_padding, groups) -> bool:
    return x.dtype == torch.float64 and x.dim() == 4 and groups > 1 and w.shape[1] == 1 and not transposed


def _depthwise_conv64(x, w, b, stride, padding, dilation, transposed, output_padding, groups) -> torch.Tensor:
    """A depthwise 2-D convolution in float64 as a sum over the kernel's taps: torch's own float64
    depthwise kernel is 30-50x slower than this (MobileNetV2 at batch 4: 45 s)."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    if co != c:
        x = x.repeat_interleave(co // c, dim=1)
    xp = torch.nn.functional.pad(x, (pw, pw, ph, ph))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = torch.zeros((n, co, oh, ow), dtype=x.dtype)
    if b is not None:
        out += b.view(1, co, 1, 1)
    for i in range(kh):
        for j in range(kw):
            tap = xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            out.addcmul_(tap, w[:, 0, i, j].view(1, co, 1, 1))
    return out


def _derivative(func, name, args, kwargs, i, y) -> torch.Tensor:
    """d func / d args[i] elementwise, as float32: written out for the common ops, else by central
    differences in float64 (h ~ 2^-26 relative: exact to ~1e-8, plenty for a variance)."""
    a = args[i]
    x = a.float()
    if name in ("add", "sub") and len(args) == 2:
        return torch.full_like(x, (-1.0 if name == "sub" and i == 1 else 1.0) * kwargs.get("alpha", 1))
    if name == "mul" and len(args) == 2:
        other = args[1 - i]
        return other.float().expand(y.shape).clone() if isinstance(other, torch.Tensor) else torch.full_like(x, other)
    if name == "relu":
        return (x > 0).float()
    if name == "hardtanh":
        lo, hi = (list(args[1:]) + [-1.0, 1.0][len(args) - 1:])[:2]
        return ((x > lo) & (x < hi)).float()
    if name == "sigmoid":
        s = y.float()
        return s * (1 - s)
    if name == "silu":  # s + silu(x) (1 - s)
        s = torch.sigmoid(x)
        return torch.addcmul(s, y.float(), 1 - s)
    h = (a.abs() + 1) * 2.0 ** -26
    lo, hi = list(args), list(args)
    lo[i], hi[i] = a - h, a + h
    return ((func(*hi, **kwargs) - func(*lo, **kwargs)) / (2 * h)).float()


def float64_with_error_scale(module: torch.nn.Module, *inputs: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The module's outputs evaluated in float64, and sigma for each: the standard deviation of the
    error a float32 evaluation makes there (see the module docstring). The module is converted to
    float64 in place."""
    module = module.double().eval()
    mode = _ErrorScale()
    # fused attention kernels (nn.MultiheadAttention's fast path, SDPA's flash kernel) have no rule:
    # torch's composite forms compute the same function from ops that have one
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), mode:
            out = module(*(torch.from_numpy(np.ascontiguousarray(x)).double() for x in inputs))
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.numpy() for o in outs], [(mode.get_or_zero(o).double() / _SCALE).sqrt().numpy() for o in outs]


def tolerance(y: np.ndarray, sigma: np.ndarray, k: float = K) -> np.ndarray:
    """Per element: K * sigma + u * |y| + TINY."""
    return k * sigma + U * np.abs(y) + TINY


def worst_ratio(got: np.ndarray, y: np.ndarray, sigma: np.ndarray) -> tuple[float, tuple[int, ...]]:
    """max |got - y| / (sigma + u |y| + TINY) and where: how many K the worst element uses."""
    ratio = np.abs(got.astype(np.float64) - y) / (sigma + U * np.abs(y) + TINY)
    ratio = np.where(np.isnan(got) != np.isnan(y), np.inf, np.nan_to_num(ratio, nan=0.0))
    i = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else ()
    return (float(ratio[i]) if ratio.size else 0.0), tuple(int(j) for j in i)


def check_float32(got: Sequence[np.ndarray] | np.ndarray, exact: Sequence[np.ndarray], sigma: Sequence[np.ndarray],
                  label: str, k: float = K) -> None:
    """Assert every element of every output is within tolerance(exact, sigma, k) of the float64 answer."""
    got = [got] if isinstance(got, np.ndarray) else list(got)
    assert len(got) == len(exact), f"{label}: {len(got)} outputs, expected {len(exact)}"
    for n, (g, y, s) in enumerate(zip(got, exact, sigma)):
        assert g.shape == y.shape, f"{label} output {n}: shape {g.shape}, expected {y.shape}"
        bound = tolerance(y, s, k)
        err = np.abs(g.astype(np.float64) - y)
        bad = ~((err <= bound) | (g == y) | (np.isnan(g) & np.isnan(y)))
        if bad.any():
            ratio, i = worst_ratio(g, y, s)
            raise AssertionError(
                f"{label} output {n}: {int(bad.sum())} of {g.size} elements beyond K * sigma + u|y| + TINY "
                f"(K = {k}); worst at {i}: got {g[i]!r}, float64 {y[i]!r}, sigma {s[i]:.3g}, "
                f"error {err[i]:.3g} = {ratio:.1f} sigma")
