"""int64 and bool tensors end to end: graph inputs of those dtypes, integer and boolean intermediates
through elementwise ops, concat, views and reductions, and a bool mask choosing floats; both backends."""

from __future__ import annotations

import torch

from tests.optest import check_module


class IntsAndMasks(torch.nn.Module):
    def forward(self, x, i, b):
        j = i * 2 + 1
        k = torch.cat([j, i], dim=1)
        mask = (x > 0) & b
        chosen = torch.where(mask, x, torch.zeros_like(x))
        return (k, mask, chosen, k.reshape(2, -1).permute(1, 0), j.sum(1), (i // 3) % 2,
                i.to(torch.float32) * x, ~b | (i > 0), i.type_as(x) * x, x.type_as(i), b.type_as(x))


def test_int64_and_bool_inputs_and_intermediates():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, generator=g)
    i = torch.randint(-10, 10, (2, 5), generator=g)
    b = torch.rand(2, 5, generator=g) > 0.5
    check_module(IntsAndMasks(), x, i, b, rtol=0, atol=0)
