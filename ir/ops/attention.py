"""IR ops: attention. None of its own.

nn.MultiheadAttention and F.scaled_dot_product_attention lower to existing ops with
kernels (linear, matmul, softmax, reshape, transpose, concat, pad, add, where,
reduce_max, reduce_mean): see compiler/lowering/attention.py.
"""
