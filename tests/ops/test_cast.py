import torch
import torch.nn as nn

from tests.optest import check_module


class IntToFloat(nn.Module):
    def forward(self, x):
        indices = torch.argmax(x, dim=1)  # int64
        return indices.float() * 0.5 + x.sum(1), (x > 0).to(torch.float32)


def test_tensor_to_converts_int_and_bool_to_float():
    check_module(IntToFloat(), torch.randn(2, 5, 7), labels=["argmax as float", "mask as float"])
