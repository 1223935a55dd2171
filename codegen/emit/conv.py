"""Emit rules of the conv family: the forward's calls into codegen/kernels/conv.py."""

from __future__ import annotations

import math

import numpy as np

from codegen.emit import Emit, const, const_args, emits, lit
from codegen.emit.data import contiguous_strides, copy_call
from codegen.emit.gemm import NO_EPILOGUE, epilogue_args, linear_call, no_residual
from codegen.kernels.blocked import (
    channel_scale_blocked,
    conv1x1_blocked,
    conv1x1_blocked_prologue,
    conv2d_blocked,
    conv2d_blocked_nchw,
    conv_transpose_blocked,
    depthwise_blocked,
    expand_depthwise_blocked,
    from_blocked,
    global_avg_pool_blocked,
    group_lanes,
    pack_depthwise_blocked,
    pack_grouped_blocked,
    pack_transpose_blocked,
    pack_winograd_blocked,
    pad_bias,
    pad_to_blocks,
    pool_blocked,
    to_blocked,
    winograd_blocked,
    winograd_f4_pays,
)
from codegen.kernels.conv import (
    PAD_CODES,
    conv1x1_by_channels,
    conv1x1_packed,
    conv1x1_packed_prologue,
    conv2d,
    conv2d_by_channels,
    conv2d_packed,
    conv_transpose2d,
    interleave_taps,
    is_pointwise,
    pad5,
)
from codegen.kernels.conv_channels import call_channels, pack_channel_panels
from codegen.kernels.depthwise import DEPTHWISE_KERNELS, depthwise_path
from codegen.kernels.epilogue import ACTIVATION_CODES, ONE_PASS
from codegen.kernels.gemm import PACKED_ROWS, transpose_padded
from codegen.kernels.microkernel import MR, pack_weights, taps_channels
from codegen.kernels.norm import channel_affine
from codegen.kernels.planes import plane_pitch
from codegen.kernels.vectors import target_vector_floats
from codegen.kernels.winograd import pack_transformed, winograd_conv2d
from ir.errors import CodegenUnsupportedError
from ir.graph import Node, Value
from ir.ops.conv import _pad_pairs
from ir.ops.layout import is_depthwise_weight
from ir.types import TensorType

# kernel, stride, padding and dilation of a 1x1 stride-1 unpadded conv: conv1x1_packed's
POINTWISE = const_args((1, 1), (1, 1), (0, 0, 0, 0), (1, 1))


def transpose_weight(weight: np.ndarray, groups: int) -> np.ndarray:
    """The weight (C, O/groups, KH, KW) of conv_transpose2d as (groups, O/groups*KH*KW, C/groups):
    each group's GEMM operand, contiguous, so blocks of output channels are runs of rows."""
    c_n = weight.shape[0]
    w3 = weight.reshape(groups, c_n // groups, -1)
    return np.ascontiguousarray(w3.transpose(0, 2, 1))



# Winograd's transformed weights are 16/9 of the weights, and each of their elements meets one
# column per 2x2 tile of every image, where the direct kernel's meets one per pixel: for few tiles the
# weights' traffic decides. A batch of one 7 x 7 image (16 tiles; ResNet layer4, 512 channels) ran
# 3.2 ms a conv in the model on Winograd against 2.4-2.9 ms on the direct kernel (AVX-512 Xeon, one
# thread, its 17 MB of transformed weights from memory at every run), though alone, with its weights
# in cache, Winograd was faster (1.3 against 1.6 ms). Two such images are 32 tiles; one 14 x 14, 49.
WINOGRAD_MIN_TILES = 32
# Below this many tiles a batch, where numba targets AVX-512, Winograd also needs output sides that fill
# their tiles this well: conv2d_by_channels computes the pixels of odd sides exactly, and with few
# tiles Winograd's larger weights weigh more. AlexNet's 13 x 13 convs at batch 1 (49 tiles, 169 pixels
# in 196) ran 3-10% faster direct in the model; ResNet's 256 -> 256 on 14 x 14 (49 tiles, all filled)
# 0.47 ms on Winograd against 0.515 direct in a quiet spell of the VM (0.78-0.82 against 0.57-0.61 in
# its slow state, which slows memory-heavy kernels); batches of 7 x 7 images faster on Winograd in the
# model (ResNet-18 at batch 8, 512 -> 512: 3.55-3.86 ms against 4.5). With AVX2's 8-float vectors
# (numba told Haswell, on the same machine) the direct kernels reach half the FLOP/s and Winograd keeps
# its lead on odd sides too (256 -> 256 on 14 x 14 alone: 0.83 ms against 0.95; on AVX-512 0.46
# against 0.49) (Zen 5 EPYC, 2 threads, profile step times)
WINOGRAD_MIN_FILLED_TILES = 64
WINOGRAD_MIN_TILE_FILL = 0.9
# Each of Winograd's 16 products multiplies (O, C) by (C, tiles): below this many multiply-adds a
# product, the transforms (of C + O channels a tile) cost more than the multiplies saved. At about
# 3.2M a product Winograd gained on every conv measured (64 channels on 56 x 56, 128 on 28 x 28, 256
# on 14 x 14, 128 -> 32 on 56 x 56); at 0.2-0.8M it lost (128 -> 32 on 28 x 28: 0.34 ms against 0.22
# direct, on 14 x 14 0.16 against 0.10; 64 -> 64 on 16 x 16 0.11 against 0.09) (AVX-512 Xeon, 2 threads).
# Counted over one image's tiles: a batch runs image by image when an image's transformed input fills
# a plane (winograd.PLANE_BYTES), so a batch of 8 such convs lost as much: DenseNet's 128 -> 32 on
# 28 x 28, 1.52 ms against 1.15 direct, on 14 x 14 0.44 against 0.33 (Zen 5 EPYC, 2 threads)
WINOGRAD_MIN_PRODUCT_MACS = 1 << 20
# Each tile's transforms cost about as much per channel, input and output, whatever the product: with
# few channels on both sides (a YOLOv5s's 32 -> 32 on 160 x 160) they outweigh the multiplies saved
# once the transformed planes of a large image run through L3, as in a model: that conv took 1.64-1.74
# ms on Winograd against 1.31-1.43 direct at batch 1, 12.9-13.5 against 10.8 at batch 8 (in the model,
# Zen 5 EPYC, 2 threads; alone, warm, Winograd was 10% faster). 64 -> 64 and 128 -> 32 gain (64 -> 64
# on 80 x 80 0.66 against 1.0 ms; DenseNet's 128 -> 32 on 56 x 56 0.43 against 0.59)
WINOGRAD_MIN_CHANNEL_MACS = 4096
# ... and at least this many output channels, where numba targets AVX-512: DenseNet-121's 128 -> 32 convs on
# 56 x 56 at batch 8 took 9.6-11.2 ms a conv on Winograd against onnxruntime's 4.5 direct, and the whole
# forward on the direct kernels 0.905 of its time at batch 1 and at batch 8 (in-process A/B, 2 threads, Intel
# Xeon; with 64-lane blocks the convs of 64 channels and more run blocked, so this is what it changes). On a
# Zen 5 EPYC, against the direct kernels of then, that conv alone had run 0.43 ms on Winograd against 0.59
WINOGRAD_MIN_OUT_CHANNELS = 64
# Where vectors hold 8 floats (AVX2), whose direct kernels reach half AVX-512's FLOP/s, Winograd gains from
# products 4x smaller, with channels enough: in-process A/B, one conv + ReLU, Zen 3 EPYC, 2 threads, Winograd
# / direct (medians of 7 rounds; each shape in 2-7 processes, which differ by up to 1.8x on this VM): 128 -> 64
# channels on 16 x 16 (0.5M a product) 0.66-0.74, 64 -> 32 on 32 x 32 0.63-0.85 in 5 processes of 7, 64 -> 64
# on 16 x 16 (0.26M) 0.71-0.92, batch 8 0.80-0.86. With fewer channel pairs it wins in some processes and
# loses in others: 32 -> 16 on 64 x 64 0.87 / 1.39, 32 -> 32 on 32 x 32 0.65 / 1.80, 16 -> 16 on 64 x 64
# 1.06 / 1.67. In the models (profile steps, alternating processes): UNet-small at batch 8 26.8-33.5 ->
# 22.2-24.2 ms, batch 1 3.15-3.97 -> 2.86-3.30; DenseNet-121's twelve 128 -> 32 convs on 28 x 28 at batch 1
# level (alone 0.59-0.81 of the direct time; in the model both paths ran 0.4 or 0.75 ms a conv, by process)
WINOGRAD_AVX2_MIN_PRODUCT_MACS = 1 << 18
WINOGRAD_AVX2_MIN_CHANNEL_MACS = 2048
# On AVX2, products of WINOGRAD_MIN_PRODUCT_MACS or more gain from this many tiles a batch (fewer than
# WINOGRAD_MIN_TILES): alone, conv + SiLU, Winograd / conv2d_by_channels (in-process A/B, medians of 9 rounds,
# Zen 3 EPYC, 2 threads): 512 -> 512 channels on 7 x 7 0.75, 256 -> 256 on 7 x 7 0.80, on 10 x 10 0.73; smaller
# products lose (256 -> 128 on 7 x 7 1.18, 192 -> 192 1.07, 128 -> 128 on 10 x 10 1.01), and so do fewer tiles
# (512 -> 512 on 5 x 5, 9 tiles: 1.39). In the model, where the transformed weights (16/9 of the direct
# kernel's) come from memory: ResNet-18 at batch 1 (its three 512 -> 512 convs on 7 x 7) 0.93 of the time,
# ResNet-50 0.98, YOLOv5s at 320 level (in-process A/B of the whole forward, 21 rounds). Those tiles must be
# this full: 5 x 5 images fill 25 of a tile's 36 pixels, and two of them (18 tiles) ran 1.12 of the direct time
# with 512 channels; four 4 x 4 images (16 full tiles) 0.65
WINOGRAD_AVX2_MIN_TILES = 16
WINOGRAD_AVX2_FEW_TILES_MIN_FILL = 0.75


def uses_winograd(node: Node) -> bool:
    """Whether conv node runs Winograd F(2x2, 3x3): 3x3, stride 1, no dilation or groups, zero
    padding, float32 weights known at compile time, and enough tiles and channels to gain (fewer on
    AVX2: WINOGRAD_AVX2_MIN_PRODUCT_MACS, WINOGRAD_AVX2_MIN_TILES; on AVX-512 WINOGRAD_MIN_OUT_CHANNELS)."""
    a, x, w, y = node.attrs, node.inputs[0], node.inputs[1], node.outputs[0]
    image_tiles = -(-y.shape[2] // 2) * -(-y.shape[3] // 2)
    tiles = y.shape[0] * image_tiles  # the batch's
    pixels, tile_pixels = y.shape[2] * y.shape[3], 4 * image_tiles  # an image's, and its tiles'
    product = w.shape[0] * w.shape[1] * image_tiles  # multiply-adds of each of an image's 16 products
    avx512 = target_vector_floats() == 16
    min_product = WINOGRAD_MIN_PRODUCT_MACS if avx512 else WINOGRAD_AVX2_MIN_PRODUCT_MACS
    min_channels = WINOGRAD_MIN_CHANNEL_MACS if avx512 else WINOGRAD_AVX2_MIN_CHANNEL_MACS
    min_out = WINOGRAD_MIN_OUT_CHANNELS if avx512 else 1
    if avx512:  # below WINOGRAD_MIN_FILLED_TILES, full enough tiles
        full = pixels >= WINOGRAD_MIN_TILE_FILL * tile_pixels
        min_tiles = WINOGRAD_MIN_TILES if full else max(WINOGRAD_MIN_TILES, WINOGRAD_MIN_FILLED_TILES)
    elif product >= WINOGRAD_MIN_PRODUCT_MACS and pixels >= WINOGRAD_AVX2_FEW_TILES_MIN_FILL * tile_pixels:
        min_tiles = WINOGRAD_AVX2_MIN_TILES
    else:
        min_tiles = WINOGRAD_MIN_TILES
    return (w.is_constant and w.dtype == x.dtype == "float32" and w.shape[2:] == (3, 3)
            and tuple(a["stride"]) == (1, 1) and tuple(a["dilation"]) == (1, 1) and a["groups"] == 1
            and a["padding_mode"] == "zeros" and tiles >= min_tiles
            and product >= min_product and w.shape[0] * w.shape[1] >= min_channels and w.shape[0] >= min_out)


def is_linear_on_pixels(node: Node) -> bool:
    """Whether conv node is a linear layer on (N, C) rows: a 1x1 conv, no groups or padding, on 1x1
    images, as in squeeze-and-excitation blocks. On the microkernel its one pixel would fill one of
    a panel's 16 columns, and each output channel's epilogue would be a call of its own."""
    a, x, w, y = node.attrs, node.inputs[0], node.inputs[1], node.outputs[0]
    return (w.shape[2:] == (1, 1) and a["groups"] == 1 and not any(a["padding"])
            and x.shape[2:] == (1, 1) and y.shape[2:] == (1, 1))


def subsamples_first(node: Node) -> bool:
    """Whether conv node, a float32 1x1 conv with a stride and no padding (a ResNet's downsample), runs
    on its input subsampled into a scratch array first, as a stride-1 conv: the strided path gathers
    every phase plane of the input, SH * SW times what the conv reads (ResNet-50's 256 -> 512 channels
    on 56 -> 28, 0.83 ms in the model against 0.53 for a stride-1 1x1 conv of the same FLOPs)."""
    a, w = node.attrs, node.inputs[1]
    return (uses_packed_weights(node) and w.shape[2:] == (1, 1) and tuple(a["stride"]) != (1, 1)
            and not any(a["padding"]))


def uses_channel_vectors(node: Node, vector_floats: int) -> bool:
    """Whether conv node runs conv1x1_by_channels (output channels in the vectors): a float32 1x1
    unpadded conv (stride 1, or subsampled first) with constant weights on images of at most
    PACKED_ROWS pixels, where MR-pixel row groups pad the pixels 10% less than conv2d_packed's half
    panels of vector_floats columns do: 7 x 7 images on AVX-512 (54 rows against 64 columns;
    320 -> 1280 channels 0.25 -> 0.23 ms, 960 -> 320 0.18 -> 0.16 ms, AVX-512 EPYC, 2 threads),
    not on AVX2 (56 columns)."""
    a, x, w, y = node.attrs, node.inputs[0], node.inputs[1], node.outputs[0]
    pixels = y.shape[2] * y.shape[3]
    rows, columns = -(-pixels // MR) * MR, -(-pixels // vector_floats) * vector_floats
    return (w.is_constant and w.dtype == x.dtype == "float32" and w.shape[2:] == (1, 1) and a["groups"] == 1
            and (tuple(a["stride"]) == (1, 1) or subsamples_first(node)) and not any(a["padding"])
            and pixels <= PACKED_ROWS and rows * 1.1 < columns)


# conv2d_by_channels' conditions: reductions this long at least (16 -> 32 channels 3x3 on 32 x 32, 144
# steps: 33 against 28 us on conv2d_packed; 64 -> 32, 576 steps: 98 against 101), output channels that
# fill this much of its half panels at least (16 of 32 on AVX-512: 2x slower), output rows that fill
# less than this much of the phase planes' pitch conv2d_packed computes (56 of 58 on 56 x 56: 2-4%
# slower; 40 of 42 on 40 x 40: 5% faster), and zero-padded planes (gathered whole by each task) up to this
# size. A strided conv on a batch takes it whatever its rows fill: each task gathers one image's planes
# (at batch 1 every task gathers the whole image), and conv2d_packed's tiles each gather theirs with
# halo rows: 64 -> 128 channels 3x3 stride 2 from 56 x 56 at batch 8 2.25 -> 2.04 ms (batch 1: 0.27 ->
# 0.29), 128 -> 128 4.86 -> 4.12 (batch 2: 1.15 -> 0.99), 128 -> 256 from 80 x 80 17.6 -> 16.1; AVX2
# code on the same Zen 5 4.22 -> 3.85, 2.18 -> 2.03, 34.0 -> 32.3. In the model, ResNet-50 at batch 8's
# 128 -> 128 stride 2: 5.2-6.0 -> 4.3-4.5 ms (profile steps, alternating processes)
# On AVX2 (16 channels a call: 2 FMAs per gathered broadcast, against 4 on AVX-512) a strided conv at
# batch 1 runs as fast on conv2d_packed, whose tiles gather their part of the input only: 256 -> 512
# channels 3x3 stride 2 from 20 x 20 2.21 against 2.18 ms, 128 -> 256 from 40 x 40 1.84 against 1.88; at
# batch > 1 faster here: 64 -> 128 from 28 x 28 at batch 8 1.90 -> 2.14 ms, 128 -> 128 from 16 x 16 1.29
# -> 1.46, 32 -> 64 from 56 x 56 2.17 -> 2.81, 64 -> 24 from 15 x 15 0.22 -> 0.25, 256 -> 256 from 14 x 14
# level (Zen 3 EPYC: 32 KiB L1d, 512 KiB L2; 2 threads, in-process A/B of the compiled conv, medians; since
# each task gathers one zero-padded plane a channel, not the stride's phase planes). On AVX2 at batch 1 too,
# where its weight is at most CHANNEL_TAPS_STRIDED_MAX_WEIGHT_BYTES (measured on smaller planes than the two
# above; same machine and method): 3x3 stride 2, against conv2d_packed, 96 -> 96 channels from 8 x 8 0.60,
# 64 -> 64 from 28 x 28 0.77, 96 -> 192 from 28 x 28 0.77, 64 -> 24 from 15 x 15 (Inception-v3's, unpadded)
# 0.77, 128 -> 256 from 28 x 28 0.83, 128 -> 128 from 32 x 32 0.86, 256 -> 256 and 192 -> 384 from 14 x 14 0.91;
# 128 -> 256 from 40 x 40 and 64 -> 128 from 56 x 56 level; 384 -> 384 from 14 x 14 (5.3 MB of weights) level,
# 256 -> 512 from 20 x 20 (4.7 MB) 1.06 (each of its two tasks streams half the weight past every pixel group).
# Vectors of CHANNEL_TAPS_STRIDED_MIN_FLOATS floats (AVX-512) take it at any batch, as an unstrided conv,
# and, unstrided, whatever its rows fill where its reduction has CHANNEL_TAPS_FULL_ROWS_MIN_STEPS steps:
# DenseNet-121's 128 -> 32 channels 3x3 on 56 x 56 (56 of 58; 1152 steps), its six of them 0.85-0.88 of their
# time on conv2d_packed in the model at batch 1 (profile per node, alternating processes, Zen 5 EPYC, 2
# threads); YOLOv5s's 32 -> 32 on 80 x 80 (288 steps) level to 1.08, and AlexNet's strided stem level.
# Unpadded, conv2d_by_channels reads the input's planes where they lie (no gathered copy) and takes
# reductions down to CHANNEL_TAPS_UNPADDED_MIN_STEPS whatever its rows fill: against conv2d_packed (AVX2,
# Zen 3 EPYC, 2 threads, in-process A/B, medians), 3x3: 24 -> 24 stride 2 from 15 x 15 0.68 at batch 8 and
# 0.63 at 1 (216 steps), 128 -> 128 stride 2 from 28 x 28 0.71, 64 -> 64 on 13 x 13 0.83, 32 -> 32 on
# 29 x 29 at batch 8 0.85, 32 -> 32 on 149 x 149 0.90, 64 -> 64 on 56 x 56 0.95, 16 -> 16 on 30 x 30 at
# batch 8 0.96 (144 steps), 32 -> 64 on 112 x 112 level, 8 -> 16 (72 steps) 1.05; 5x5 48 -> 64 on 35 x 35
# 0.92. (Padded, 16 -> 24 and 24 -> 24 on 15 x 15 stay on conv2d_packed: 1.12-1.18.)
CHANNEL_TAPS_UNPADDED_MIN_STEPS = 128
CHANNEL_TAPS_STRIDED_MIN_FLOATS = 16
CHANNEL_TAPS_FULL_ROWS_MIN_STEPS = 1024
CHANNEL_TAPS_STRIDED_MAX_WEIGHT_BYTES = 3 << 20
CHANNEL_TAPS_MIN_STEPS = 256
CHANNEL_TAPS_MIN_FILL = 0.75
CHANNEL_TAPS_MAX_ROW_FILL = 0.96
CHANNEL_TAPS_MAX_PLANE_BYTES = 1 << 22
# Grouped convs whose groups fill whole half panels of channels (8 channels on AVX2: RegNetY's groups of
# 8), on output planes of at most this many pixels (at batch 1, GROUPED_CHANNEL_TAPS_MAX_PIXELS_ONE):
# conv2d_by_channels runs a group's channels in one vector and the batch's pixels end to end in MR-pixel
# groups, each group's channels gathered over the last group's planes just before its panels, where
# conv2d_packed pads each group's 8 channels to two MR-row panels and each image's pixels to a panel.
# Groups of 8, 3x3, against conv2d_packed, kernel alone: batch 8, 440 channels on 7 x 7 0.58, 208 on 14 x 14
# 0.88, 104 on 28 x 28 0.93, 48 from 112 x 112 stride 2 0.92; batch 2, 104 on 28 x 28 0.90, 48 on 56 x 56
# 1.15; batch 1, 440 on 7 x 7 0.75, 96 on 8 x 8 0.72, 208 on 14 x 14 0.88, 96 on 14 x 14 0.83, 104 on 14 x 14
# 1.08, 48 and 24 on 14 x 14 level, 208 from 28 x 28 stride 2 0.80, on 16 x 16 1.0-1.2, 104 on 28 x 28 1.27.
# In a RegNetY-400MF-like model (profile per node): at batch 8 its 14 x 14 convs 0.73-0.82, 28 x 28 0.87-0.97,
# at batch 1 7 x 7 0.92-0.95 and 14 x 14 0.86-1.0 (Zen 3 EPYC, AVX2, 2 threads, medians).
GROUPED_CHANNEL_TAPS_MAX_PIXELS = 784
GROUPED_CHANNEL_TAPS_MAX_PIXELS_ONE = 196
# Ungrouped convs on small planes (an image's output pixels at most CHANNEL_TAPS_SMALL_MAX_PIXELS,
# the batch's at most CHANNEL_TAPS_SMALL_MAX_BATCH_PIXELS) take it whatever their reduction's length (from
# CHANNEL_TAPS_SMALL_MIN_STEPS) and rows, where their channels fill the kernel's calls (a panel, half of one,
# or one vector of 16: micro_gemm_taps_vector) CHANNEL_TAPS_MIN_FILL: conv2d_packed pads a 7 x 7 image's
# rows to 13 columns for a 1 x 7 kernel, then its pixels to 64 or 96. Kernel alone against conv2d_packed (2
# threads, Zen 5 EPYC, batch 1, 3 x 3 unless named): 16 -> 16 on 4 x 4 0.46, on 7 x 7 0.61, 1 x 7 0.63, 7 x 1
# 0.75, 5 x 5 0.76, on 8 x 8 0.91, on 10 x 10 1.02; 32 -> 32 on 7 x 7 0.75, on 10 x 10 0.78; 48 -> 48 1 x 3 and
# 3 x 1 on 7 x 7 0.79-0.80, 3 x 3 0.83, on 10 x 10 0.90; 24 -> 24 0.89-0.96; 8 -> 16 on 8 x 8 0.71; 16 -> 16
# stride 2 from 14 x 14 0.54, 48 -> 64 from 15 x 15 0.41; batch 8 of 7 x 7, 16 -> 16 0.88, 32 -> 32 0.76. Not
# beyond: 16 -> 16 on 12 x 12 at batch 8 1.20, 16 -> 96 on 12 x 12 1.32, on 14 x 14 1.26, 24 -> 24 on 15 x 15
# 1.45; nor a stem's short reduction (3 -> 16 on 12 x 12, 27 steps: 1.07). AVX2 code (haswell's features, same
# machine and method) gains as much: 16 -> 16 on 7 x 7 0.56, 1 x 7 0.54, on 10 x 10 0.88, 32 -> 32 on 10 x 10
# 0.78, 24 -> 24 0.84-0.96, strided 48 -> 64 from 15 x 15 0.55, batch 8 of 7 x 7 0.64-0.68 (on 12 x 12, 16 -> 96
# 1.09 and 24 -> 24 1.09)
CHANNEL_TAPS_SMALL_MAX_PIXELS = 100
CHANNEL_TAPS_SMALL_MAX_BATCH_PIXELS = 512
CHANNEL_TAPS_SMALL_MIN_STEPS = 64


def _channel_taps_fill(o: int, vector_floats: int) -> float:
    """The share of the channels conv2d_by_channels computes that are o's own: whole panels of
    taps_channels(vector_floats), the last one's channels in a panel's call, half of one, or one vector
    (call_channels, as _taps_task chooses)."""
    panel = taps_channels(vector_floats)
    rest = o % panel
    return o / (o - rest + (call_channels.py_func(rest, panel, vector_floats) if rest else 0))


def uses_channel_taps(node: Node, vector_floats: int) -> bool:
    """Whether conv node runs conv2d_by_channels (output channels in the vectors, MR pixels a
    microkernel call): a float32 conv with constant weights and a kernel larger than 1x1, without groups
    (grouped: GROUPED_CHANNEL_TAPS_MAX_PIXELS; strided on AVX2: at batch > 1, or of a small weight),
    unpadded (CHANNEL_TAPS_UNPADDED_MIN_STEPS), or on images small enough that conv2d_packed's
    phase-plane columns past each output row, or its pixels padded to whole half panels, cost more than
    MR-pixel groups and channel panels pad. On AVX-512, 2 threads, Zen 5 EPYC: 512 -> 512 channels on
    7 x 7 0.65 -> 0.57 ms, 256 -> 256 on 14 x 14 0.55 -> 0.49, 384 -> 256 on 13 x 13 0.78 -> 0.65,
    64 -> 192 5x5 on 27 x 27 1.08 -> 0.92, 256 -> 512 stride 2 on 40 x 40 2.29 -> 1.97, batch 8 of
    256 -> 256 on 14 x 14 4.20 -> 3.71."""
    a, x, w, y = node.attrs, node.inputs[0], node.inputs[1], node.outputs[0]
    if not (uses_packed_weights(node) and w.shape[2:] != (1, 1)):
        return False
    (c, wd), (o, oh, ow), (kh, kw) = (x.shape[1], x.shape[3]), y.shape[1:], w.shape[2:]
    (sh, sw), (dh, dw), pl = a["stride"], a["dilation"], a["padding"][1]
    half = 2 * vector_floats if vector_floats == 16 else vector_floats  # micro_gemm_taps_half's channels
    wq = plane_pitch.py_func(ow, wd, kw, sw, dw, pl)  # conv2d_packed's phase planes' pitch
    # the zero-padded planes conv2d_by_channels gathers, an image's
    plane_bytes = 4 * c * ((oh - 1) * sh + (kh - 1) * dh + 1) * max((ow - 1) * sw + (kw - 1) * dw + 1, pl + wd)
    if a["groups"] > 1:  # not depthwise (w.shape[1]: a group's input channels)
        most = GROUPED_CHANNEL_TAPS_MAX_PIXELS if y.shape[0] > 1 else GROUPED_CHANNEL_TAPS_MAX_PIXELS_ONE
        return (w.shape[1] > 1 and (o // a["groups"]) % half == 0 and oh * ow <= most
                and plane_bytes <= CHANNEL_TAPS_MAX_PLANE_BYTES)
    strided, narrow = (sh, sw) != (1, 1), vector_floats < CHANNEL_TAPS_STRIDED_MIN_FLOATS
    small = oh * ow <= CHANNEL_TAPS_SMALL_MAX_PIXELS and y.shape[0] * oh * ow <= CHANNEL_TAPS_SMALL_MAX_BATCH_PIXELS
    if (small and c * kh * kw >= CHANNEL_TAPS_SMALL_MIN_STEPS
            and _channel_taps_fill(o, vector_floats) >= CHANNEL_TAPS_MIN_FILL):
        return plane_bytes <= CHANNEL_TAPS_MAX_PLANE_BYTES
    if strided and narrow and y.shape[0] == 1 and 4 * math.prod(w.shape) > CHANNEL_TAPS_STRIDED_MAX_WEIGHT_BYTES:
        return False
    strided_any = strided and (y.shape[0] > 1 or narrow)  # it takes conv2d_by_channels whatever its rows fill
    unpadded = not any(a["padding"]) and c * kh * kw >= CHANNEL_TAPS_UNPADDED_MIN_STEPS
    return ((c * kh * kw >= CHANNEL_TAPS_MIN_STEPS or unpadded) and o >= CHANNEL_TAPS_MIN_FILL * -(-o // half) * half
            and (ow < CHANNEL_TAPS_MAX_ROW_FILL * wq or strided_any or unpadded
                 or not (narrow or strided) and c * kh * kw >= CHANNEL_TAPS_FULL_ROWS_MIN_STEPS)
            and plane_bytes <= CHANNEL_TAPS_MAX_PLANE_BYTES)


def is_depthwise(node: Node) -> bool:
    """Whether conv node is depthwise (groups == input channels, one input channel a group): it runs on
    a kernel of depthwise.py, whatever its dtype and weights."""
    groups = node.attrs["groups"]
    return groups == node.inputs[0].shape[1] and node.inputs[1].shape[1] == 1 and groups > 1


def uses_packed_weights(node: Node) -> bool:
    """Whether conv node runs on our microkernel with weights packed at compile time: float32
    weights known at compile time, and not depthwise (which has direct kernels of its own)."""
    x, w = node.inputs[0], node.inputs[1]
    return w.is_constant and w.dtype == x.dtype == "float32" and not is_depthwise(node)


def writes_over_residual(node: Node) -> int | None:
    """The input index of a fused conv's residual when its kernel may write the output over it
    (codegen/memory_plan.py, `overwritable`): conv2d_packed and Winograd apply the epilogue per run
    of outputs (epilogue_run), reading each residual element just before writing the output element
    at its index, and read nothing else of it. Only with a post-activation of none or relu, which
    epilogue_run adds in its one pass (others would copy each run of the residual first), and for
    Winograd an activation of at most a clamp too (conv2d_packed applies others to its block first),
    as conv1x1_by_channels, which adds the residual on the way out of its block only then. Not for
    the other kernels: the depthwise flat path, for one, writes the output before adding the residual."""
    if node.op not in ("fused_conv2d", "blocked_conv2d") or len(node.inputs) < 4 or ACTIVATION_CODES[
            node.attrs["post_activation"]] > 1:
        return None
    one_pass = ACTIVATION_CODES[node.attrs["activation"]] <= ONE_PASS
    if node.op == "blocked_conv2d":  # its kernels store each block from the registers, residual read first
        return 3 if one_pass else None
    if uses_winograd(node) or uses_channel_vectors(node, target_vector_floats()) or uses_channel_taps(
            node, target_vector_floats()):
        return 3 if one_pass else None
    return 3 if uses_packed_weights(node) and not is_linear_on_pixels(node) else None


def _zero_padded_input(e: Emit) -> tuple[list[str], str, tuple[int, ...]]:
    """(lines, input, padding) for a conv whose kernel pads with zeros as it reads: a padding_mode
    other than zeros (reflect, replicate, circular) is applied by the forward first, into a
    scratch array, and the conv then runs unpadded."""
    a = e.node.attrs
    padding = tuple(a["padding"])
    if a["padding_mode"] == "zeros" or not any(padding):
        return [], e.args[0], padding
    pt, pl, pb, pr = padding
    n, c, h, w = e.node.inputs[0].type.shape
    padded = f"{e.outs[0]}_padded"
    lines = [e.scratch(padded, (n, c, h + pt + pb, w + pl + pr), e.node.inputs[0].type.dtype),
             f"{e.call(pad5)}({e.args[0]}.reshape({lit((1, n, c, h, w))}), "
            f"{padded}.reshape({lit((1, n, c, h + pt + pb, w + pl + pr))}), {lit((0, 0, pt, pl))}, "
            f"{lit((0, 0, 0, 0))}, {lit((n, c, h, w))}, {PAD_CODES[a['padding_mode']]}, 0.0)"]
    return lines, padded, (0, 0, 0, 0)


def _subsampled_input(e: Emit) -> tuple[list[str], str]:
    """(lines, input) for a conv that subsamples first: the lines copy every stride-th pixel of the
    input into a scratch array, the conv's input from then on (subsamples_first)."""
    (n, c, h, w), (sh, sw) = e.node.inputs[0].type.shape, e.node.attrs["stride"]
    shape = (n, c, *e.node.outputs[0].type.shape[2:])
    out = f"{e.outs[0]}_subsampled"
    return [e.scratch(out, shape, e.node.inputs[0].type.dtype),
            copy_call(e, e.args[0], out, shape, (c * h * w, h * w, sh * w, sw), contiguous_strides(shape))], out


@emits("conv2d", "fused_conv2d")
def _emit_conv2d(e: Emit) -> list[str]:
    a = e.node.attrs
    bias = e.bias(2, e.node.outputs[0].shape[1])
    residual = e.args[3] if len(e.args) > 3 else no_residual(e.outs[0])
    act = epilogue_args(a) if e.node.op == "fused_conv2d" else NO_EPILOGUE
    if is_linear_on_pixels(e.node):
        (n, c), o = e.node.inputs[0].shape[:2], e.node.outputs[0].shape[1]
        return [linear_call(e, n, c, o, e.weight(1, f".reshape({lit((o, c))})"), act)]
    if uses_winograd(e.node):
        u_ = e.prepack(1, "winograd", pack_transformed)
        top, left = a["padding"][0], a["padding"][1]
        return [f"{e.call(winograd_conv2d)}({e.args[0]}, {u_}, {bias}, {residual}, {e.outs[0]}, "
                f"{const_args(top, left)}, {act})"]
    if subsamples_first(e.node):  # unpadded: a stride-1 conv on the subsampled input
        (lines, x), padding, stride = _subsampled_input(e), (0, 0, 0, 0), (1, 1)
    else:
        (lines, x, padding), stride = _zero_padded_input(e), tuple(a["stride"])
    if uses_channel_vectors(e.node, target_vector_floats()):
        o, c = e.node.inputs[1].shape[:2]
        wt = e.prepack(1, "by_channels", lambda w: transpose_padded(w.reshape(o, c)))
        return lines + [f"{e.call(conv1x1_by_channels)}({x}, {wt}, {bias}, {residual}, {e.outs[0]}, {act})"]
    if uses_channel_taps(e.node, target_vector_floats()):
        groups = a["groups"]
        wt = e.prepack(1, f"channel_panels{groups}", lambda w: pack_channel_panels(w, None, groups))
        return lines + [f"{e.call(conv2d_by_channels)}({x}, {wt}, {bias}, {residual}, {e.outs[0]}, "
                        f"{const_args(e.node.inputs[1].shape[2:], stride, padding, a['dilation'])}, {act})"]
    if uses_packed_weights(e.node):
        groups = a["groups"]
        wp = e.prepack(1, f"panels{groups}", lambda w: pack_weights(w, groups))
        kernel = e.node.inputs[1].shape[2:]
        if is_pointwise(kernel, stride, padding):
            return lines + [f"{e.call(conv1x1_packed)}({x}, {wp}, {bias}, {residual}, {e.outs[0]}, {POINTWISE}, {act}, "
                            "None)"]
        return lines + [f"{e.call(conv2d_packed)}({x}, {wp}, {bias}, {residual}, {e.outs[0]}, "
                        f"{const_args(kernel, stride, padding, a['dilation'])}, {act}, None)"]
    if is_depthwise(e.node):
        (n, c, h, w), (t, left, b, r) = e.node.inputs[0].shape, a["padding"]
        x_shape = (n, c, h, w) if padding == tuple(a["padding"]) else (n, c, h + t + b, w + left + r)  # padded first
        path = depthwise_path(e.node.inputs[0].dtype, x_shape, e.node.inputs[1].shape, e.node.outputs[0].shape,
                              stride, padding, a["dilation"], target_vector_floats())
        return lines + [f"{e.call(DEPTHWISE_KERNELS[path])}({x}, {e.weight(1)}, {bias}, {residual}, {e.outs[0]}, "
                        f"{const_args(*stride, *padding[:2], *a['dilation'])}, {act})"]
    return lines + [f"{e.call(conv2d)}({x}, {e.weight(1)}, {bias}, {residual}, {e.outs[0]}, "
                    f"{const_args(a['stride'], padding, a['dilation'], a['groups'])}, {act})"]


@emits("blocked_conv2d")
def _emit_blocked_conv2d(e: Emit) -> list[str]:
    """A conv on the channel-blocked layout (compiler/passes/block_channels.py): depthwise_blocked for a
    depthwise one, conv2d_blocked_nchw for one reading an NCHW input, winograd_blocked (blocked_winograd_tile),
    conv1x1_blocked for a 1x1 unpadded one, conv2d_blocked for the others."""
    a = e.node.attrs
    block, segments = a["block"], tuple(a.get("in_segments") or ())
    depthwise = is_depthwise_weight(a["groups"], e.node.inputs[1].shape)
    bias = _blocked_bias(e, 2, segments if depthwise else ())
    residual = e.args[3] if len(e.args) > 3 else no_residual(e.outs[0])
    tag = _lanes_tag(block, segments)
    kernel, stride, padding = e.node.inputs[1].shape[2:], tuple(a["stride"]), tuple(a["padding"])
    if depthwise:
        wd = e.prepack(1, f"depthwise_blocked{tag}", lambda w: pack_depthwise_blocked(w, block, segments or None))
        return [f"{e.call(depthwise_blocked)}({e.args[0]}, {wd}, {bias}, {residual}, {e.outs[0]}, "
                f"{const_args(kernel, stride, padding, a['dilation'])}, {epilogue_args(a)})"]
    out_channels = const(e.node.inputs[1].shape[0])  # the real ones: a last block they fill half of runs half wide
    if len(e.node.inputs[0].shape) == 4:  # an NCHW input: its channels unpadded in the reduction
        wt = e.prepack(1, f"blocked{block}_nchw", lambda w: pack_channel_panels(w, block))
        return [f"{e.call(conv2d_blocked_nchw)}({e.args[0]}, {wt}, {bias}, {residual}, {e.outs[0]}, "
                f"{const_args(kernel, stride, padding, a['dilation'])}, {epilogue_args(a)}, {out_channels})"]
    if a["groups"] > 1:  # grouped (ir/ops/layout.py's blocked_groups_fit): each output block from its group's blocks
        groups = a["groups"]
        wt = e.prepack(1, f"grouped{groups}_blocked{block}", lambda w: pack_grouped_blocked(w, groups, block))
        lanes = group_lanes(groups, e.node.inputs[1].shape[0], block)
        return [f"{e.call(conv2d_blocked)}({e.args[0]}, {wt}, {bias}, {residual}, {e.outs[0]}, "
                f"{const_args(kernel, stride, padding, a['dilation'])}, {epilogue_args(a)}, {out_channels}, "
                f"{const(lanes)})"]
    tile = blocked_winograd_tile(e.node)
    if tile:
        up = e.prepack(1, f"winograd{tile}_blocked{tag}",
                       lambda w: pack_winograd_blocked(w, block, tile, segments or None))
        return [f"{e.call(winograd_blocked)}({e.args[0]}, {up}, {bias}, {residual}, {e.outs[0]}, "
                f"{const_args(padding[0], padding[1])}, {epilogue_args(a)})"]
    wt = e.prepack(1, f"blocked{tag}",
                   lambda w: pack_channel_panels(pad_to_blocks(w, block, segments=segments or None), block))
    if kernel == (1, 1) and not any(padding):
        return [f"{e.call(conv1x1_blocked)}({e.args[0]}, {wt}, {bias}, {residual}, {e.outs[0]}, {const(stride)}, "
                f"{epilogue_args(a)}, {out_channels})"]
    return [f"{e.call(conv2d_blocked)}({e.args[0]}, {wt}, {bias}, {residual}, {e.outs[0]}, "
            f"{const_args(kernel, stride, padding, a['dilation'])}, {epilogue_args(a)}, {out_channels}, {const(0)})"]


@emits("blocked_affine_conv2d")
def _emit_blocked_affine_conv2d(e: Emit) -> list[str]:
    """A 1x1 unpadded conv on the blocked layout after a per-channel affine (and ReLU) of its input: the
    prologue applied by conv1x1_blocked_prologue, scale and shift padded to the input's lanes."""
    a = e.node.attrs
    block, segments = a["block"], tuple(a.get("in_segments") or ())
    if e.node.inputs[3].shape[2:] != (1, 1) or any(a["padding"]) or a["groups"] != 1:
        raise CodegenUnsupportedError(f"blocked_affine_conv2d {e.node.name}: only a 1x1 unpadded ungrouped conv")
    tag = _lanes_tag(block, segments)
    scale, shift = (e.prepack(i, f"lanes{tag}", lambda v: pad_bias(v, block, segments or None)) for i in (1, 2))
    bias = _blocked_bias(e, 4, ())
    residual = e.args[5] if len(e.args) > 5 else no_residual(e.outs[0])
    wt = e.prepack(3, f"blocked{tag}",
                   lambda w: pack_channel_panels(pad_to_blocks(w, block, segments=segments or None), block))
    relu = int(a["in_activation"] == "relu")
    return [f"{e.call(conv1x1_blocked_prologue)}({e.args[0]}, {scale}, {shift}, {const(relu)}, {wt}, {bias}, "
            f"{residual}, {e.outs[0]}, {const(tuple(a['stride']))}, {epilogue_args(a)}, "
            f"{const(e.node.inputs[3].shape[0])})"]


def _lanes_tag(block: int, segments: tuple[int, ...]) -> str:
    """The part of a prepacked weight's name that says which lanes it was packed for: "16", "16_24_40"."""
    return f"{block}" + "".join(f"_{c}" for c in segments)


def _blocked_bias(e: Emit, index: int, segments: tuple[int, ...]) -> str:
    """Input `index`, a blocked conv's bias (its channels in `segments`, () for one) with zeros in the lanes
    padding its output's blocks, or zeros for the output's lanes."""
    block, y = e.node.attrs["block"], e.node.outputs[0]
    lanes = y.shape[1] * block
    bias = e.node.inputs[index] if len(e.node.inputs) > index else None
    if bias is not None and bias.is_constant and bias.shape[0] != lanes:
        return e.prepack(index, f"blocks{_lanes_tag(block, segments)}", lambda b: pad_bias(b, block, segments or None))
    return e.bias(index, lanes)


@emits("blocked_conv_transpose2d")
def _emit_blocked_conv_transpose2d(e: Emit) -> list[str]:
    """An upsampling whose kernel is its stride on the channel-blocked layout: conv_transpose_blocked."""
    a = e.node.attrs
    block, segments = a["block"], tuple(a.get("in_segments") or ())
    wt = e.prepack(1, f"transpose_blocked{_lanes_tag(block, segments)}",
                   lambda w: pack_transpose_blocked(w, block, segments or None))
    return [f"{e.call(conv_transpose_blocked)}({e.args[0]}, {wt}, {_blocked_bias(e, 2, ())}, {e.outs[0]}, "
            f"{const(tuple(a['stride']))})"]


@emits("blocked_expand_depthwise")
def _emit_blocked_expand_depthwise(e: Emit) -> list[str]:
    """A 1x1 expansion and the depthwise conv of its result in one kernel (compiler/passes/fuse_expand_depthwise.py)."""
    a = e.node.attrs
    block, segments = a["block"], tuple(a.get("in_segments") or ())
    tag = _lanes_tag(block, segments)
    we = e.prepack(1, f"blocked{tag}",
                   lambda w: pack_channel_panels(pad_to_blocks(w, block, segments=segments or None), block))
    wd = e.prepack(3, f"depthwise_blocked{block}", lambda w: pack_depthwise_blocked(w, block))
    residual = e.args[5] if len(e.args) > 5 else no_residual(e.outs[0])
    expand = const_args(ACTIVATION_CODES[a["expand_activation"]], float(a["expand_alpha"]), float(a["expand_beta"]))
    return [f"{e.call(expand_depthwise_blocked)}({e.args[0]}, {we}, {_blocked_bias(e, 2, ())}, {wd}, "
            f"{_blocked_bias(e, 4, ())}, {residual}, {e.outs[0]}, "
            f"{const_args(e.node.inputs[3].shape[2:], a['stride'], a['padding'], a['dilation'])}, ({expand}), "
            f"{epilogue_args(a)})"]


def blocked_winograd_tile(node: Node) -> int:
    """The Winograd tile a blocked_conv2d node runs: 4 (F(4x4, 3x3)) for a 3x3 stride-1 ungrouped conv where
    blocked.winograd_f4_pays, else 2 (F(2x2, 3x3)) where the NCHW conv would take Winograd, else 0 (direct)."""
    plain = unblocked_conv(node)
    if runs_winograd_f4(plain):
        return 4
    return 2 if uses_winograd(plain) else 0


def runs_winograd_f4(node: Node) -> bool:
    """Whether conv node (on NCHW shapes) runs Winograd F(4x4, 3x3) once blocked: 3x3, stride 1, no
    dilation or groups, where blocked.winograd_f4_pays."""
    a, x, y = node.attrs, node.inputs[0], node.outputs[0]
    return (node.inputs[1].shape[2:] == (3, 3) and tuple(a["stride"]) == (1, 1) and tuple(a["dilation"]) == (1, 1)
            and a["groups"] == 1 and winograd_f4_pays(y.shape[0], x.shape[1], y.shape[1], y.shape[2], y.shape[3]))


def unblocked_conv(node: Node) -> Node:
    """The fused_conv2d a blocked_conv2d node computes, on NCHW values of its shapes (for the rules that
    choose a conv's kernel)."""
    def plain(v: Value, channels: int) -> Value:
        n, _, h, w, *_ = v.shape  # (an NCHW input as it is)
        return Value(v.name, TensorType((n, channels, h, w), v.dtype), v.data)

    attrs = {k: v for k, v in node.attrs.items() if k not in ("block", "in_segments")}
    weight = node.inputs[1]
    x = plain(node.inputs[0], weight.shape[1] * attrs["groups"])
    return Node("fused_conv2d", node.name, [x, *node.inputs[1:3]], [plain(node.outputs[0], weight.shape[0])], attrs)


@emits("to_blocked")
def _emit_to_blocked(e: Emit) -> list[str]:
    return [f"{e.call(to_blocked)}({e.args[0]}, {e.outs[0]})"]


@emits("blocked_max_pool2d", "blocked_avg_pool2d")
def _emit_blocked_pool2d(e: Emit) -> list[str]:
    a = e.node.attrs
    is_max = e.node.op == "blocked_max_pool2d"
    flags = const_args(is_max, bool(a.get("count_include_pad", True)), int(a.get("divisor_override") or 0))
    return [f"{e.call(pool_blocked)}({e.args[0]}, {e.outs[0]}, "
            f"{const_args(a['kernel'], a['stride'], a['padding'], a.get('dilation', (1, 1)))}, {flags})"]


@emits("blocked_global_avg_pool")
def _emit_blocked_global_avg_pool(e: Emit) -> list[str]:
    segments = tuple(e.node.attrs.get("segments") or (e.node.outputs[0].shape[1],))
    return [f"{e.call(global_avg_pool_blocked)}({e.args[0]}, {e.outs[0]}, {const(segments)})"]


@emits("blocked_channel_scale")
def _emit_blocked_channel_scale(e: Emit) -> list[str]:
    return [f"{e.call(channel_scale_blocked)}({e.args[0]}, {e.args[1]}, {e.outs[0]})"]


@emits("from_blocked")
def _emit_from_blocked(e: Emit) -> list[str]:
    return [f"{e.call(from_blocked)}({e.args[0]}, {e.outs[0]}, {const(tuple(e.node.attrs['segments']))})"]


def _as_fused_conv(node: Node, x: Value) -> Node:
    """The fused_conv2d that fused_affine_conv2d node runs after its prologue, on input x."""
    attrs = {k: v for k, v in node.attrs.items() if k != "in_activation"}
    outputs = [Value(v.name, v.type) for v in node.outputs]  # copies: a Node takes its outputs' producer
    return Node("fused_conv2d", node.name, [x, *node.inputs[3:]], outputs, attrs)


def takes_prologue(node: Node) -> bool:
    """Whether fused_affine_conv2d node runs conv1x1_packed_prologue, which applies the affine to
    each tile of its input on the way in: the 1x1 stride-1 unpadded convs without groups that run
    conv2d_packed's path reading the input in place. The others apply it into a scratch array first."""
    conv = _as_fused_conv(node, node.inputs[0])
    a = conv.attrs
    return (uses_packed_weights(conv) and conv.inputs[1].shape[2:] == (1, 1) and a["groups"] == 1
            and tuple(a["stride"]) == (1, 1) and not any(a["padding"]) and not is_linear_on_pixels(conv)
            and not uses_channel_vectors(conv, target_vector_floats()))


@emits("fused_affine_conv2d")
def _emit_affine_conv2d(e: Emit) -> list[str]:
    x, scale, shift, *conv_args = e.args
    relu = e.node.attrs["in_activation"] == "relu"
    if takes_prologue(e.node):
        _, bias, *rest = conv_args
        residual = rest[0] if rest else no_residual(e.outs[0])
        wp = e.prepack(3, "panels1", lambda w: pack_weights(w, 1))
        return [f"{e.call(conv1x1_packed_prologue)}({x}, {wp}, {bias}, {residual}, {e.outs[0]}, {POINTWISE}, "
                f"{epilogue_args(e.node.attrs)}, ({scale}, {shift}, {const(int(relu))}))"]
    xv = e.node.inputs[0]
    (n, c), tmp = xv.shape[:2], f"{e.outs[0]}_prologue"
    rest3, lo = (n, c, math.prod(xv.shape[2:])), 0.0 if relu else -math.inf
    lines = [e.scratch(tmp, xv.shape, xv.dtype),
             f"{e.call(channel_affine)}({x}.reshape({lit(rest3)}), {scale}, {shift}, {lit(lo)}, "
             f"{tmp}.reshape({lit(rest3)}))"]
    conv = _as_fused_conv(e.node, Value(tmp, xv.type))
    inner = Emit(conv, [tmp, *conv_args], e.outs, e.imports, e.definitions, e.prepacked, e.in_place, e.offsets,
                 e.arena_bytes, e.scratch_space)
    return lines + _emit_conv2d(inner)


def is_pixel_unshuffled_gemm(node: Node) -> bool:
    """Whether conv_transpose2d node is a 1x1 conv followed by a pixel interleave: float32 weights and
    bias (or none) known at compile time, kernel == stride, no padding, dilation or groups, the output
    exactly H * KH x W * KW (a UNet's upsampling). Each input pixel then meets each kernel tap once,
    and no two taps write one output."""
    a, x, w, y = node.attrs, node.inputs[0], node.inputs[1], node.outputs[0]
    (h, wd), (kh, kw) = x.shape[2:], w.shape[2:]
    bias_known = len(node.inputs) < 3 or node.inputs[2].is_constant
    return (w.is_constant and bias_known and w.dtype == x.dtype == "float32" and a["groups"] == 1
            and tuple(a["stride"]) == (kh, kw) and not any(a["padding"]) and tuple(a["dilation"]) == (1, 1)
            and y.shape[2:] == (h * kh, wd * kw))


def _conv_transpose_as_pointwise(e: Emit) -> list[str]:
    """conv_transpose2d as conv2d_packed's 1x1 conv into (N, O*KH*KW, H, W) scratch, channel
    (o, i, j) the products of tap (i, j) and bias o, then interleave_taps into the output. The GEMM
    and scatter-add path (conv_transpose2d) ran a UNet's 2x2 stride-2 upsamplings 1.6-2.5x behind
    onnxruntime: 128 -> 64 channels on 8 x 8, 48 against 19 us."""
    (n, c, h, w), (_, o, kh, kw) = e.node.inputs[0].shape, e.node.inputs[1].shape
    taps = kh * kw
    wp = e.prepack(1, "pointwise_taps", lambda wt: pack_weights(
        np.ascontiguousarray(wt.transpose(1, 2, 3, 0)).reshape(o * taps, c, 1, 1), 1))
    bias = e.prepack(2, "per_tap", lambda b: np.repeat(b, taps)) if len(e.args) > 2 else e.bias(2, o * taps)
    tmp = f"{e.outs[0]}_taps"
    return [e.scratch(tmp, (n, o * taps, h, w), "float32"),
            f"{e.call(conv1x1_packed)}({e.args[0]}, {wp}, {bias}, {no_residual(tmp)}, {tmp}, {POINTWISE}, "
            f"{NO_EPILOGUE}, None)",
            f"{e.call(interleave_taps)}({tmp}, {e.outs[0]}, {kh}, {kw})"]


@emits("conv_transpose2d")
def _emit_conv_transpose2d(e: Emit) -> list[str]:
    a = e.node.attrs
    if is_pixel_unshuffled_gemm(e.node):
        return _conv_transpose_as_pointwise(e)
    bias = e.bias(2, e.node.outputs[0].shape[1])
    groups = a["groups"]
    if e.node.inputs[1].is_constant:
        wt = e.prepack(1, f"by_group{groups}", lambda w: transpose_weight(w, groups))
    else:  # a weight computed by the model: rearranged on every run
        c_n = e.node.inputs[1].shape[0]
        wt = (f"frozen(np.ascontiguousarray({e.args[1]}.reshape({lit((groups, c_n // groups, -1))})"
              f".transpose(0, 2, 1)))")  # read-only, as a constant's (Emit.weight)
    kernel = e.node.inputs[1].shape[2:]
    return [f"{e.call(conv_transpose2d)}({e.args[0]}, {wt}, {bias}, {e.outs[0]}, "
            f"{const_args(kernel, a['stride'], a['padding'], a['dilation'])})"]


@emits("pad")
def _emit_pad(e: Emit) -> list[str]:
    a = e.node.attrs
    shape, out = e.node.inputs[0].type.shape, e.node.outputs[0].type.shape
    pairs = _pad_pairs(len(shape), a["pads"])
    if len(shape) > 4 and any(any(p) for p in pairs[:-4]):
        raise CodegenUnsupportedError("padding of more than the 4 trailing dims")
    lead = math.prod(shape[:-4])
    shape4, out4 = (1,) * (4 - len(shape)) + shape[-4:], (1,) * (4 - len(out)) + out[-4:]
    pairs4 = [(0, 0)] * (4 - len(pairs)) + pairs[-4:]
    before = tuple(max(b, 0) for b, _ in pairs4)
    crop = tuple(max(-b, 0) for b, _ in pairs4)
    kept = tuple(n - max(-b, 0) - max(-f, 0) for n, (b, f) in zip(shape4, pairs4))
    value = float(a["value"]) if e.node.inputs[0].type.dtype.startswith("float") else int(a["value"])
    return [f"{e.call(pad5)}({e.args[0]}.reshape({lit((lead,) + shape4)}), {e.outs[0]}.reshape({lit((lead,) + out4)}), "
            f"{lit(before)}, {lit(crop)}, {lit(kept)}, {PAD_CODES[a['mode']]}, {lit(value)})"]
