import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.optest import check_module


class ConvVariants(nn.Module):
    def __init__(self):
        super().__init__()
        self.plain = nn.Conv2d(3, 8, 3, padding=1, stride=2)
        self.depthwise = nn.Conv2d(8, 8, 3, groups=8, padding=1, padding_mode="reflect")

    def forward(self, x):
        y = F.relu(self.plain(x))
        return F.silu(self.depthwise(y)), torch.sigmoid(y)


def test_conv_smoke():
    check_module(ConvVariants(), torch.randn(2, 3, 17, 16))
