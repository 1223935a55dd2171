"""Attention (nn.MultiheadAttention, F.scaled_dot_product_attention), through pnnx.

pnnx cannot take bool model inputs, so bool masks are computed in the models from
float inputs (which also puts them ahead of the query in pnnx's operand order, as in
real models). Fully masked rows are NaN or zero as torch makes them.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from ir.errors import UnsupportedOperatorError
from tests.optest import check_module, export


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _randomize(module: nn.Module) -> nn.Module:
    """Non-zero biases everywhere (torch initialises the projection biases to 0, hiding mistakes)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    return module.eval()


class SequenceFirst(nn.Module):
    """pnnx's own combinations, sequence first: bias or not, add_bias_kv + add_zero_attn, kdim/vdim,
    self-attention, key = value, 2-D and 3-D float masks, averaged / per-head / no weights."""

    def __init__(self):
        super().__init__()
        self.plain = nn.MultiheadAttention(12, 3)
        self.no_bias = nn.MultiheadAttention(12, 4, bias=False)
        self.extra = nn.MultiheadAttention(12, 2, add_bias_kv=True, add_zero_attn=True)
        self.cross = nn.MultiheadAttention(12, 3, kdim=5, vdim=7)
        self.cross_extra = nn.MultiheadAttention(12, 6, kdim=5, vdim=7, bias=True, add_bias_kv=True,
                                                 add_zero_attn=True)

    def forward(self, q, k, v, kv, m2, m3):
        a, aw = self.plain(q, q, q)
        b, bw = self.no_bias(q, kv, kv, average_attn_weights=False)
        c, cw = self.extra(q, kv, kv, attn_mask=m2)
        d, _ = self.cross(q, k, v, attn_mask=m3, need_weights=False)
        e, ew = self.cross_extra(q, k, v, attn_mask=m2, average_attn_weights=False)
        return a, aw, b, bw, c, cw, d, e, ew


def test_multihead_attention_sequence_first():
    # L = 5 queries, S = 7 keys, N = 2, E = 12; m3 is (N * heads of `cross`, L, S)
    check_module(_randomize(SequenceFirst()), torch.randn(5, 2, 12), torch.randn(7, 2, 5), torch.randn(7, 2, 7),
                 torch.randn(7, 2, 12), torch.randn(5, 7), torch.randn(6, 5, 7))


class BatchFirst(nn.Module):
    """batch_first: torch's fused fast path (self-attention, even heads, bias) and its generic path."""

    def __init__(self):
        super().__init__()
        self.fast = nn.MultiheadAttention(16, 4, batch_first=True)
        self.odd = nn.MultiheadAttention(15, 5, batch_first=True)
        self.cross = nn.MultiheadAttention(16, 2, kdim=6, vdim=3, add_bias_kv=True, batch_first=True)
        self.no_bias = nn.MultiheadAttention(16, 4, bias=False, add_zero_attn=True, batch_first=True)

    def forward(self, q, q15, k, v, m2, m3):
        a, aw = self.fast(q, q, q)
        b, _ = self.fast(q, q, q, need_weights=False)
        c, cw = self.odd(q15, q15, q15, attn_mask=m2[:, :3], average_attn_weights=False)
        d, dw = self.cross(q, k, v, attn_mask=m3)
        e, ew = self.no_bias(q, q, q, average_attn_weights=False)
        return a, aw, b, c, cw, d, dw, e, ew


def test_multihead_attention_batch_first():
    # N = 3, L = 3 (q15 and q), S = 4; m3 is (N * heads of `cross`, L, S)
    check_module(_randomize(BatchFirst()), torch.randn(3, 3, 16), torch.randn(3, 3, 15), torch.randn(3, 4, 6),
                 torch.randn(3, 4, 3), torch.randn(3, 4), torch.randn(6, 3, 4))


class Masks(nn.Module):
    """Bool and float attn_mask / key_padding_mask, alone and together; some rows fully masked:
    NaN with weights or on torch's fast path, zeros on its SDPA path (no weights)."""

    def __init__(self):
        super().__init__()
        self.seq = nn.MultiheadAttention(8, 2)
        self.bf = nn.MultiheadAttention(8, 2, batch_first=True)
        self.cross = nn.MultiheadAttention(8, 2, kdim=3, vdim=3)

    def forward(self, q, qb, kv, am, kpm, am3):
        bool_am, bool_kpm, bool_am3 = am > 0.5, kpm > 0.5, am3 > 0.5
        float_kpm = torch.where(bool_kpm, float("-inf"), kpm)
        a, aw = self.seq(q, q, q, attn_mask=bool_am)                          # row 0 fully masked: NaN
        b, _ = self.seq(q, q, q, attn_mask=bool_am, need_weights=False)       # zeros there
        c, cw = self.seq(q, q, q, key_padding_mask=bool_kpm)                  # batch 1 fully masked
        d, _ = self.seq(q, q, q, attn_mask=bool_am3, key_padding_mask=bool_kpm, need_weights=False)
        e, ew = self.seq(q, q, q, attn_mask=am, key_padding_mask=float_kpm)   # float masks, -inf rows
        f, _ = self.bf(qb, qb, qb, attn_mask=bool_am, need_weights=False)     # fast path: NaN
        g, _ = self.bf(qb, qb, qb, key_padding_mask=bool_kpm, need_weights=False)
        h, hw = self.cross(q, kv, kv, attn_mask=bool_am[:, :4], key_padding_mask=kpm[:, :4])
        return a, aw, b, c, cw, d, e, ew, f, g, h, hw


def test_multihead_attention_masks():
    # L = S = 5, N = 2 (kv: S = 4); am row 0 > 0.5 throughout, kpm batch 1 > 0.5 throughout
    am, kpm, am3 = torch.rand(5, 5) * 0.9, torch.rand(2, 5) * 0.9, torch.rand(4, 5, 5) * 0.9
    am[0], kpm[1], am3[1, 2] = 0.7, 0.8, 0.6
    check_module(_randomize(Masks()), torch.randn(5, 2, 8), torch.randn(2, 5, 8), torch.randn(4, 2, 3), am, kpm, am3)


class Unbatched(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.cross = nn.MultiheadAttention(8, 4, kdim=3, vdim=5, add_bias_kv=True)

    def forward(self, q, k, v, am, kpm):
        a, aw = self.self_attn(q, q, q, attn_mask=am[:, :5] > 0.8)
        b, bw = self.cross(q, k, v, key_padding_mask=kpm > 0.8, average_attn_weights=False)
        c, _ = self.cross(q, k, v, attn_mask=am.expand(4, 5, 6), need_weights=False)
        return a, aw, b, bw, c


def test_multihead_attention_unbatched():
    check_module(_randomize(Unbatched()), torch.randn(5, 8), torch.randn(6, 3), torch.randn(6, 5),
                 torch.rand(5, 6), torch.rand(6))


class Sdpa(nn.Module):
    """F.scaled_dot_product_attention: 4-D and 3-D, q and k lengths apart, float / bool / broadcast
    masks (bool: True takes part; a row of False gives zeros), is_causal, scale, enable_gqa."""

    def forward(self, q, k, v, m, q3, k3, v3, k2, v2):
        keep = m > -1.5
        return (F.scaled_dot_product_attention(q, k, v),
                F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                F.scaled_dot_product_attention(q, k, v, attn_mask=m[0, :1]),
                F.scaled_dot_product_attention(q, q, q, is_causal=True),
                F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
                F.scaled_dot_product_attention(k, q, q, is_causal=True),
                F.scaled_dot_product_attention(q3, k3, v3, attn_mask=m[0, 0]),
                F.scaled_dot_product_attention(q, k2, v2, attn_mask=keep[:, :1], enable_gqa=True))


def test_scaled_dot_product_attention():
    # N = 2, H = 4 (2 key/value heads for gqa), L = 5, S = 7, E = 8, Ev = 6; one row of m fully < -1.5
    m = torch.randn(2, 4, 5, 7)
    m[0, 1, 2] = -2.0
    check_module(Sdpa(), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 6), m,
                 torch.randn(3, 5, 8), torch.randn(3, 7, 8), torch.randn(3, 7, 6),
                 torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 6))


class SdpaDropout(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)


def test_scaled_dot_product_attention_dropout_is_unsupported():
    with pytest.raises(UnsupportedOperatorError, match="dropout_p"):
        compiler.compile(export(SdpaDropout(), torch.randn(1, 2, 3, 4)), backend="interpreter")


class AmbiguousMask(nn.Module):
    """A bool (N, S) mask with N == L: torch's key_padding_mask, though pnnx's operands cannot say so."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2)

    def forward(self, q, kpm):
        return self.attn(q, q, q, key_padding_mask=kpm > 0.5, need_weights=False)[0]


def test_multihead_attention_ambiguous_bool_mask_is_unsupported():
    with pytest.raises(UnsupportedOperatorError, match="attn_mask from key_padding_mask"):
        compiler.compile(export(AmbiguousMask(), torch.randn(3, 3, 8), torch.rand(3, 3)), backend="interpreter")
