"""Lowering of attention: nn.MultiheadAttention and F.scaled_dot_product_attention.

Both become existing IR ops with kernels, following torch's math path:

    scores = (q * scale) @ k^T + bias      matmul, add (scale folded into q)
    probs  = softmax(scores, -1)           softmax
    out    = probs @ v                     matmul

The bias is the sum of the masks, as additive float terms: a float mask is added as
it is, a bool mask becomes -inf where it masks (where). A row masked entirely is NaN
after softmax; torch's SDPA returns zeros there instead, so its output gets those
rows zeroed (where) unless constant masks show that no row can be.

nn.MultiheadAttention adds the in-projections (three linears, the scale folded into
the query's weights), the head split (reshape + transpose, the key straight into its
transposed layout), the extra key/value columns of add_bias_kv and add_zero_attn
(concat, the masks padded with zeros), the head merge and the out-projection.

pnnx lists a MultiheadAttention's operands in the order the traced module first uses
them (bool masks first: torch converts them to float before anything else; then the
query; key, value and float masks after it, in an order torch's shape checks decide)
and labels its last operand `$attn_mask` when there is any mask, whichever it is. The
roles are read from the operands' shapes, that order breaking ties (_mha_operands).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from compiler.lowering.core import OpContext, Unsupported, lowers
from compiler.lowering.params import reshaped
from ir.graph import Value

_NEG_INF = -np.inf


# -- small emitters -------------------------------------------------------------------------------


def _scalar(ctx: OpContext, name: str, value: float, dtype: str) -> Value:
    return ctx.const(name, np.array(value, dtype=dtype))


def _transpose(ctx: OpContext, x: Value, perm: tuple[int, ...], name: str) -> Value:
    return ctx.intermediate("transpose", [x], {"perm": perm}, name)


def _swap_last(ctx: OpContext, x: Value, name: str) -> Value:
    """x with its last two axes swapped (k -> k^T)."""
    perm = tuple(range(x.type.rank - 2)) + (x.type.rank - 1, x.type.rank - 2)
    return _transpose(ctx, x, perm, name)


def _is_float(v: Value) -> bool:
    return np.issubdtype(np.dtype(v.dtype), np.floating)


# -- masks as additive terms --------------------------------------------------------------------


@dataclass
class _Term:
    """One additive term of the attention bias, and its data when known at compile time."""

    value: Value
    data: np.ndarray | None


def _mask_term(ctx: OpContext, mask: Value, shape: tuple[int, ...], masks_where: bool, dtype: str,
               name: str) -> _Term:
    """`mask` reshaped to `shape` as an additive term: float masks as they are; bool masks
    -inf where they equal `masks_where` (True for MultiheadAttention, False for SDPA), else 0."""
    value = reshaped(ctx, mask, shape, f"{name}_view")
    data = None if not mask.is_constant else mask.data.reshape(shape)
    if mask.dtype == "bool":
        neg, zero = _scalar(ctx, f"{name}_neg_inf", _NEG_INF, dtype), _scalar(ctx, f"{name}_zero", 0.0, dtype)
        value = ctx.intermediate("where", [value, neg, zero] if masks_where else [value, zero, neg], name=name)
        if data is not None:
            data = np.where(data == masks_where, _NEG_INF, 0.0).astype(dtype)
    elif not _is_float(mask):
        raise ctx.format_error(f"attention mask of dtype {mask.dtype}: torch takes bool or float masks")
    return _Term(value, data)


def _causal_term(ctx: OpContext, rows: int, cols: int, dtype: str) -> _Term:
    """is_causal: -inf above the diagonal of the (rows, cols) scores (torch's tril, top-left aligned)."""
    data = np.where(np.tril(np.ones((rows, cols), dtype=bool)), 0.0, _NEG_INF).astype(dtype)
    return _Term(ctx.const("causal_mask", data), data)


def _sum_terms(ctx: OpContext, terms: list[_Term]) -> Value | None:
    bias = terms[0].value if terms else None
    for i, term in enumerate(terms[1:]):
        bias = ctx.intermediate("add", [bias, term.value], name=f"bias_{i}")
    return bias


def _may_mask_whole_rows(terms: list[_Term]) -> bool:
    """Whether the bias (the sum of the terms) may be -inf along a whole row: it may if a term is
    known only at run time; if all are constants, their sum tells."""
    if not terms or any(t.data is None for t in terms):
        return bool(terms)
    total = sum(np.asarray(t.data, dtype=np.float64) for t in terms)
    return bool(np.isneginf(total).all(axis=-1).any())


# -- the attention core ---------------------------------------------------------------------------


def _attend(ctx: OpContext, q: Value, kt: Value, v: Value, bias: Value | None, zero_masked_rows: bool,
            out_name: str | None = None) -> tuple[Value, Value]:
    """softmax(q @ kt + bias, -1) @ v, with q already scaled; returns (output, probabilities).
    zero_masked_rows: rows whose bias is -inf throughout give 0 (SDPA) instead of NaN."""
    scores = ctx.intermediate("matmul", [q, kt], name="scores")
    if bias is not None:
        scores = ctx.intermediate("add", [scores, bias], name="masked_scores")
    probs = ctx.intermediate("softmax", [scores], {"dim": -1}, name="probs")
    name = out_name or ctx.temp("context")
    if not zero_masked_rows:
        return ctx.emit("matmul", [probs, v], outputs=[name])[0], probs
    out = ctx.intermediate("matmul", [probs, v], name="context")
    row_max = ctx.intermediate("reduce_max", [bias], {"dims": (-1,), "keepdim": True}, name="bias_row_max")
    masked = ctx.intermediate("eq", [row_max, _scalar(ctx, "neg_inf", _NEG_INF, bias.dtype)], name="masked_rows")
    return ctx.emit("where", [masked, _scalar(ctx, "zero", 0.0, out.dtype), out], outputs=[name])[0], probs


# -- F.scaled_dot_product_attention -------------------------------------------------------------


def _operand(ctx: OpContext, name: str, index: int) -> Value | None:
    """The operand `$name`, else (older pnnx writes no names) the one at `index`."""
    value = ctx.input_named(name)
    if value is None and not any(ctx.op.input_names) and index < len(ctx.op.inputs):
        value = ctx.input(index)
    return value


def _repeat_heads(ctx: OpContext, x: Value, heads: int, name: str) -> Value:
    """enable_gqa: repeat_interleave x's heads (axis -3) up to `heads`, as reshape, expand, reshape."""
    *batch, h, rows, cols = x.shape
    if heads % h:
        raise ctx.format_error(f"enable_gqa: {heads} query heads are not a multiple of {h} key/value heads")
    grouped = reshaped(ctx, x, (*batch, h, 1, rows, cols), f"{name}_grouped")
    repeated = ctx.intermediate("expand", [grouped], {"shape": (*batch, h, heads // h, rows, cols)}, f"{name}_repeated")
    return reshaped(ctx, repeated, (*batch, heads, rows, cols), f"{name}_heads")


@lowers("F.scaled_dot_product_attention")
def scaled_dot_product_attention(ctx: OpContext) -> None:
    """softmax(q k^T * scale + bias) v over the last two axes; the leading axes broadcast."""
    q, k, v = (_operand(ctx, n, i) for i, n in enumerate(("query", "key", "value")))
    if q is None or k is None or v is None:
        raise ctx.format_error("scaled_dot_product_attention needs query, key and value operands")
    mask = _operand(ctx, "attn_mask", 3)
    if any(x.type.rank < 2 for x in (q, k, v)):
        raise ctx.format_error(f"query, key and value need at least 2 dims, got {q.type}, {k.type}, {v.type}")
    if float(ctx.param("dropout_p", 0.0)) > 0:
        raise Unsupported("dropout_p > 0 (SDPA drops out even in eval mode: the output is random)")
    scale = ctx.param("scale", None)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if scale != 1:
        q = ctx.intermediate("mul", [q, _scalar(ctx, "scale", scale, q.dtype)], name="scaled_query")
    kt = _swap_last(ctx, k, "key_t")
    if ctx.param("enable_gqa", False) and min(q.type.rank, k.type.rank, v.type.rank) >= 3:
        heads = q.shape[-3]
        if k.shape[-3] != heads:
            kt = _repeat_heads(ctx, kt, heads, "key_t")
        if v.shape[-3] != heads:
            v = _repeat_heads(ctx, v, heads, "value")
    terms = []
    if ctx.param("is_causal", False):
        terms.append(_causal_term(ctx, q.shape[-2], k.shape[-2], q.dtype))
    if mask is not None:
        terms.append(_mask_term(ctx, mask, mask.shape, False, q.dtype, "attn_bias"))
    zero_rows = _may_mask_whole_rows(terms)
    _attend(ctx, q, kt, v, _sum_terms(ctx, terms), zero_rows, out_name=ctx.op.outputs[0])


# -- nn.MultiheadAttention: operands ------------------------------------------------------------


@dataclass
class _Mha:
    """A MultiheadAttention's params and operands, its sizes read off the query."""

    embed: int
    heads: int
    batch_first: bool
    query: Value
    key: Value
    value: Value
    distinct: int  # how many of query, key, value are distinct operands
    attn_mask: Value | None = None
    key_padding_mask: Value | None = None

    @property
    def batched(self) -> bool:
        return self.query.type.rank == 3

    @property
    def batch(self) -> int:
        return (self.query.shape[0] if self.batch_first else self.query.shape[1]) if self.batched else 1

    def seq(self, x: Value) -> int:
        return x.shape[1] if self.batched and self.batch_first else x.shape[0]

    def fits_attn_mask(self, m: Value) -> bool:
        shape = (self.seq(self.query), self.seq(self.key))
        return m.shape in (shape, (self.batch * self.heads,) + shape)

    def fits_key_padding_mask(self, m: Value) -> bool:
        return m.shape == ((self.batch,) if self.batched else ()) + (self.seq(self.key),)


def _fits_sequence(mha: _Mha, x: Value, features: int, seq: int | None) -> bool:
    """x is laid out like the query (rank, batch) with `features` last and, if given, `seq` steps."""
    if x.type.rank != mha.query.type.rank or x.shape[-1] != features or not _is_float(x):
        return False
    if mha.batched and (x.shape[0] if mha.batch_first else x.shape[1]) != mha.batch:
        return False
    return seq is None or mha.seq(x) == seq


_ROLES = ("attn_mask", "key_padding_mask")


def _mask_roles(mha: _Mha, masks: list[Value]) -> dict[str, Value] | None:
    """attn_mask / key_padding_mask roles for the masks, by shape; None if they do not fit.
    Where two masks could each be either (2-D, L == N), torch's order of first use decides:
    key_padding_mask first among bool masks, attn_mask first among float ones; a lone float mask
    is the attn_mask (pnnx's reading); a lone bool one cannot be told apart."""
    fits = [[r for r in _ROLES if getattr(mha, f"fits_{r}")(m)] for m in masks]
    if len(masks) > 2 or not all(fits):
        return None
    options = [roles for roles in itertools.product(*fits) if len(set(roles)) == len(roles)]
    if not options:
        return None
    if len(options) > 1 and mha.batch > 1:  # with a batch of one, either reading computes the same
        dtypes = {m.dtype == "bool" for m in masks}
        if dtypes == {True} and len(masks) == 1 or len(dtypes) > 1:
            raise Unsupported(f"cannot tell attn_mask from key_padding_mask among masks of shapes "
                              f"{[m.shape for m in masks]} (bool: {[m.dtype == 'bool' for m in masks]})")
        if dtypes == {True}:
            options = [("key_padding_mask", "attn_mask")]
    return dict(zip(options[0], masks, strict=True))


def _key_value_choices(count: int) -> list[tuple[int | None, int | None]]:
    """(key, value) positions among the operands other than the query, likeliest first: distinct
    key and value (the key used first), then key = value, then both the query (self-attention)."""
    pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    return pairs + [(i, i) for i in range(count)] + [(None, None)]


def _mha_operands(ctx: OpContext, embed: int, kdim: int, vdim: int, heads: int, batch_first: bool) -> _Mha:
    """Query, key, value and masks of a MultiheadAttention. The query is the first operand that
    is not bool (bool masks come first); key and value are the likeliest operands that fit their
    shapes and leave masks that fit theirs; pnnx's `$attn_mask` label means there is a mask."""
    inputs = ctx.inputs
    first = next((i for i, x in enumerate(inputs) if x.dtype != "bool"), len(inputs))
    if first == len(inputs) or inputs[first].type.rank not in (2, 3) or inputs[first].shape[-1] != embed:
        raise ctx.format_error(f"MultiheadAttention needs a query of shape (L, N, {embed}), (N, L, {embed}) or "
                               f"(L, {embed}); operands are {[str(v.type) for v in inputs]}")
    query, others = inputs[first], inputs[:first] + inputs[first + 1:]
    labelled = "attn_mask" in ctx.op.input_names
    for i, j in _key_value_choices(len(others)):
        key, value = (query, query) if i is None else (others[i], others[j])
        mha = _Mha(embed, heads, batch_first, query, key, value, 1 if i is None else 2 if i == j else 3)
        if not (_fits_sequence(mha, key, kdim, None) and _fits_sequence(mha, value, vdim, mha.seq(key))):
            continue
        masks = [x for n, x in enumerate(others) if n not in (i, j)]
        roles = _mask_roles(mha, masks) if masks or not labelled else None
        if roles is not None:
            for role, mask in roles.items():
                setattr(mha, role, mask)
            return mha
    raise Unsupported(f"cannot tell query, key, value and masks apart in operands "
                      f"{[str(v.type) for v in inputs]} (embed_dim {embed}, kdim {kdim}, vdim {vdim})")


# -- nn.MultiheadAttention: lowering ----------------------------------------------------------------


def _in_projections(ctx: OpContext, embed: int, scale: float) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """(weight, bias) of the query, key and value projections, the query's scaled by `scale`."""
    if ctx.has_attr("in_proj_weight"):
        w = ctx.attr("in_proj_weight")
        weights = [w[:embed], w[embed:2 * embed], w[2 * embed:]]
    else:
        weights = [ctx.attr(f"{n}_proj_weight") for n in "qkv"]
    b = ctx.attr("in_proj_bias") if ctx.has_attr("in_proj_bias") else None
    biases = [None] * 3 if b is None else [b[:embed], b[embed:2 * embed], b[2 * embed:]]
    if weights[0].shape != (embed, embed) or any(w.shape[0] != embed for w in weights):
        raise ctx.format_error(f"in-projection weights {[w.shape for w in weights]} do not fit embed_dim {embed}")

    def scaled(x):
        return None if x is None else (x.astype(np.float64) * scale).astype(x.dtype)

    weights[0], biases[0] = scaled(weights[0]), scaled(biases[0])
    return list(zip(weights, biases, strict=True))


def _project(ctx: OpContext, x: Value, weight: np.ndarray, bias: np.ndarray | None, name: str) -> Value:
    inputs = [x, ctx.const(f"{name}_weight", weight)]
    if bias is not None:
        inputs.append(ctx.const(f"{name}_bias", bias))
    return ctx.intermediate("linear", inputs, name=name)


def _split_heads(ctx: OpContext, mha: _Mha, x: Value, transposed: bool, name: str) -> Value:
    """A projected (T, N, E) or (N, T, E) sequence as (N, H, T, D), or (N, H, D, T) if transposed."""
    a, b, _ = x.shape
    heads = reshaped(ctx, x, (a, b, mha.heads, mha.embed // mha.heads), f"{name}_heads")
    n, t = (0, 1) if mha.batch_first else (1, 0)
    perm = (n, 2, 3, t) if transposed else (n, 2, t, 3)
    return _transpose(ctx, heads, perm, f"{name}_split")


def _extra_columns(ctx: OpContext, mha: _Mha, columns: list[np.ndarray], x: Value, axis: int, name: str) -> Value:
    """x (N, H, ., .) with `columns` (each (E,): bias_k / bias_v, or zeros) appended along axis 2 or 3."""
    head_dim = mha.embed // mha.heads
    data = np.stack([c.reshape(mha.heads, head_dim) for c in columns], axis=-1 if axis == 3 else 1)[None]
    extra = ctx.const(f"{name}_extra", data.astype(x.dtype))
    shape = x.shape[:axis] + (len(columns),) + x.shape[axis + 1:]
    if extra.shape != shape:
        extra = ctx.intermediate("expand", [extra], {"shape": shape}, f"{name}_extra_batch")
    return ctx.intermediate("concat", [x, extra], {"dim": axis}, f"{name}_extended")


def _mha_bias(ctx: OpContext, mha: _Mha, dtype: str) -> list[_Term]:
    """attn_mask and key_padding_mask as additive terms broadcasting against (N, H, L, S)."""
    terms = []
    if mha.attn_mask is not None:
        m = mha.attn_mask
        shape = m.shape if m.type.rank == 2 else (mha.batch, mha.heads) + m.shape[1:]
        terms.append(_mask_term(ctx, m, shape, True, dtype, "attn_bias"))
    if mha.key_padding_mask is not None:
        shape = (mha.batch, 1, 1, mha.seq(mha.key))
        terms.append(_mask_term(ctx, mha.key_padding_mask, shape, True, dtype, "padding_bias"))
    return terms


def _fast_path(mha: _Mha, ctx: OpContext) -> bool:
    """Whether torch (eval, no grad) runs this module on its fused kernel, which gives NaN where
    a whole row is masked even without weights (its SDPA path gives zeros there)."""
    float_masks = any(m is not None and m.dtype != "bool" for m in (mha.attn_mask, mha.key_padding_mask))
    return (mha.batched and mha.batch_first and mha.distinct == 1 and mha.heads % 2 == 0
            and ctx.has_attr("in_proj_weight") and ctx.has_attr("in_proj_bias")
            and not ctx.param("add_bias_kv", False) and not ctx.param("add_zero_attn", False) and not float_masks)


@lowers("nn.MultiheadAttention")
def multihead_attention(ctx: OpContext) -> None:
    """torch's F.multi_head_attention_forward: project, split heads, attend, merge heads, project."""
    embed, heads = ctx.int_param("embed_dim", minimum=1), ctx.int_param("num_heads", minimum=1)
    kdim, vdim = ctx.int_param("kdim", embed, minimum=1), ctx.int_param("vdim", embed, minimum=1)
    if heads < 1 or embed % heads:
        raise ctx.format_error(f"embed_dim {embed} is not divisible into {heads} heads")
    mha = _mha_operands(ctx, embed, kdim, vdim, heads, bool(ctx.param("batch_first", False)))
    need_weights = len(ctx.op.outputs) > 1
    dtype = mha.query.dtype
    if not mha.batched:  # torch: an unbatched sequence is a batch of one, sequence first
        mha.batch_first = False
        q, k, v = (reshaped(ctx, x, (x.shape[0], 1, x.shape[1]), f"{n}_batched")
                   for x, n in ((mha.query, "query"), (mha.key, "key"), (mha.value, "value")))
    else:
        q, k, v = mha.query, mha.key, mha.value

    projections = _in_projections(ctx, embed, 1 / math.sqrt(embed // heads))
    qp = _split_heads(ctx, mha, _project(ctx, q, *projections[0], "q_proj"), False, "query")
    kt = _split_heads(ctx, mha, _project(ctx, k, *projections[1], "k_proj"), True, "key")
    vp = _split_heads(ctx, mha, _project(ctx, v, *projections[2], "v_proj"), False, "value")

    k_columns, v_columns = [], []
    if ctx.param("add_bias_kv", False):
        k_columns.append(ctx.attr("bias_k").reshape(-1))
        v_columns.append(ctx.attr("bias_v").reshape(-1))
    if ctx.param("add_zero_attn", False):
        k_columns.append(np.zeros(embed, dtype))
        v_columns.append(np.zeros(embed, dtype))
    if k_columns:
        kt = _extra_columns(ctx, mha, k_columns, kt, 3, "key")
        vp = _extra_columns(ctx, mha, v_columns, vp, 2, "value")

    terms = _mha_bias(ctx, mha, dtype)
    bias = _sum_terms(ctx, terms)
    if bias is not None and k_columns:  # the extra columns are never masked
        bias = ctx.intermediate("pad", [bias], {"pads": (0, len(k_columns))}, "bias_padded")
    zero_rows = not need_weights and not _fast_path(mha, ctx) and not k_columns and _may_mask_whole_rows(terms)
    context, probs = _attend(ctx, qp, kt, vp, bias, zero_rows)

    n, length = mha.batch, mha.seq(mha.query)
    merged = _transpose(ctx, context, (0, 2, 1, 3) if mha.batch_first else (2, 0, 1, 3), "merged_heads")
    merged = reshaped(ctx, merged, (n, length, embed) if mha.batch_first else (length, n, embed), "merged")
    out_inputs = [ctx.attr_const("out_proj.weight", dtype)]
    if ctx.has_attr("out_proj.bias"):
        out_inputs.append(ctx.attr_const("out_proj.bias", dtype))
    if mha.batched:
        ctx.emit("linear", [merged] + out_inputs, outputs=[ctx.op.outputs[0]])
    else:
        out = ctx.intermediate("linear", [merged] + out_inputs, name="out_proj")
        ctx.emit("reshape", [out], {"shape": (length, embed)}, outputs=[ctx.op.outputs[0]])
    if need_weights:
        _emit_weights(ctx, mha, probs)


def _emit_weights(ctx: OpContext, mha: _Mha, probs: Value) -> None:
    """The attention weights output: probs (N, H, L, S) averaged over heads (N, L, S) when pnnx's
    annotation of the output has that rank (average_attn_weights, torch's default), else per head;
    without the batch axis for an unbatched query."""
    name = ctx.op.outputs[1]
    annotated = ctx.annotated_shape(name)
    per_head_rank = 4 if mha.batched else 3
    average = annotated is None or len(annotated) != per_head_rank
    weights = probs
    if average:
        weights = ctx.intermediate("reduce_mean", [probs], {"dims": (1,), "keepdim": False}, "mean_weights")
    if not mha.batched:
        weights = reshaped(ctx, weights, weights.shape[1:], "unbatched_weights")
    ctx.alias(name, weights)
