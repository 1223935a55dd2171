"""Shared pytest setup: deterministic torch, single-threaded reference runs."""

import torch

torch.manual_seed(0)
torch.set_num_threads(2)
