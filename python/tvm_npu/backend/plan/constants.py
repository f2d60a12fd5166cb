"""A layer's constants as the bytes they occupy in DDR, and how its output-channel blocks load them.

Weights rows, then the bias / requantization / dequantization rows (int4's packed codes, grouped scales and
zero points included), or a vector layer's constant rows, in the one layout the command stream format
fixes (docs/npu.md sections 3 and 6). Kept apart from the planner (planner.py), which only chooses among
the blocks built here and places their bytes: these functions are the byte format, that one the schedule.
"""

from __future__ import annotations

import numpy as np

from ...contract.config import NPUConfig
from ..lower.graph import Layer
from .emit import Block
from .sram import align
from .tiling import oc_blocks


def constant_bytes(cfg: NPUConfig, layer: Layer, oc0: int, oc1: int) -> tuple[bytes, int, int]:
    """Weights rows [oc0, oc1) then the fp32 bias, the int8 requantization block (bias, scale) or the W8A16
    dequantization block (fp32 bias, zeros without one, then the weights' scales); for a
    vector layer its one constant row (ELTWISE's b, or UNARY's int8 table), a SOFTMAX's mask rows, a
    ROPE's cos and sin rows, or a NORM's fp32 gamma and beta rows, each padded to the alignment (the command
    finds beta one aligned row after gamma)."""
    if layer.const is not None and layer.kind in ("softmax", "rope"):  # fp16 rows, each aligned (a stride)
        rows = layer.const.shape[1] * 2
        return b"".join(r.tobytes().ljust(align(rows, cfg.alignment), b"\0") for r in layer.const), 0, 0
    if layer.kind == "group_norm":  # gamma and beta rows, then zeros for the G statistics records
        row = align(layer.const.shape[1] * 4, cfg.alignment)
        rows = b"".join(r.astype("<f4").tobytes().ljust(row, b"\0") for r in layer.const)
        return rows + bytes(align(12 * layer.groups, cfg.alignment)), 0, 0
    if layer.kind == "norm":
        row = align(layer.const.shape[1] * 4, cfg.alignment)
        return b"".join(r.astype("<f4").tobytes().ljust(row, b"\0") for r in layer.const), 0, 0
    if layer.const is not None:
        raw = np.ascontiguousarray(layer.const).tobytes()
        return raw, 0, 0
    if layer.w4:
        return int4_bytes(cfg, layer, oc0, oc1)
    w = layer.weight[oc0:oc1]
    oc = oc1 - oc0
    # Rows packed (docs/npu.md section 3); the bias / requantization rows start aligned after them.
    w_stride = int(np.prod(w.shape[1:])) * w.itemsize
    data = np.ascontiguousarray(w).tobytes()
    data = data.ljust(align(len(data), cfg.alignment), b"\0")
    vec = align(oc * 4, cfg.alignment)
    if layer.dtype == "int8" or layer.w8a16:  # int32 or (W8A16) fp32 bias, then the scales
        bias = np.zeros(oc, "<f4") if layer.bias is None else layer.bias[oc0:oc1]
        data += np.asarray(bias, "<i4" if layer.dtype == "int8" else "<f4").tobytes().ljust(vec, b"\0")
        data += np.asarray(layer.scale[oc0:oc1], "<f4").tobytes().ljust(vec, b"\0")
    elif layer.bias is not None:
        data += layer.bias[oc0:oc1].astype("<f4").tobytes().ljust(vec, b"\0")
    return data, w_stride, align(oc * w_stride, cfg.alignment)


def int4_bytes(cfg: NPUConfig, layer: Layer, oc0: int, oc1: int) -> tuple[bytes, int, int]:
    """A W4A16 / W4A8 dense's rows [oc0, oc1): the codes two a byte along K (even k in the low nibble), then
    its int4 dequantization block (docs/npu.md section 6): the fp32 bias row (zeros without one), under int8
    the fp32 requantization row S, the fp16
    scales [G][oc] packed, and for uint4 from the next aligned offset the zero points, G rows of
    ceil(oc / 2) bytes, even o in the low nibble."""
    codes = layer.weight[oc0:oc1].reshape(oc1 - oc0, -1).astype(np.uint8) & 0x0F
    rows = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    oc, w_stride = oc1 - oc0, rows.shape[1]
    data = rows.tobytes().ljust(align(rows.size, cfg.alignment), b"\0")
    bias = np.zeros(oc, "<f4") if layer.bias is None else layer.bias[oc0:oc1]
    block = np.asarray(bias, "<f4").tobytes().ljust(align(oc * 4, cfg.alignment), b"\0")
    if layer.dtype == "int8":  # W4A8: the requantization row S after the bias row
        block += np.asarray(layer.scale[oc0:oc1], "<f4").tobytes().ljust(align(oc * 4, cfg.alignment), b"\0")
    block += np.ascontiguousarray(layer.w_scales[:, oc0:oc1], "<f2").tobytes()
    if layer.w_zeros is not None:
        zeros = layer.w_zeros[:, oc0:oc1]
        if oc % 2:
            zeros = np.pad(zeros, ((0, 0), (0, 1)))
        packed = (zeros[:, 0::2] | (zeros[:, 1::2] << 4)).astype(np.uint8)
        block = block.ljust(align(len(block), cfg.alignment), b"\0") + packed.tobytes()
    return data + block, w_stride, align(oc * w_stride, cfg.alignment)


def layer_blocks(cfg: NPUConfig, layer: Layer, size: int, image: tuple) -> list[tuple[Block, bytes]]:
    """A conv layer's output-channel blocks of at most `size` channels, each with the DDR bytes it loads
    from. `image` is `constant_bytes` of the whole layer, its one-block layout: every weight row, then the
    bias / scale rows of every channel.

    A layer's constants lie in DDR in that layout whatever its blocks, so the blocks a planner chooses
    for M activation rows do not change the weight region: a prefill (M = the bucket's rows) and a decode
    step (M = 1) carry the same bytes, which the runtime then holds once (docs/llm.md, "The artifact").
    A block loads its weight rows and (a DMA each) its part of the bias / scale rows from there, which
    needs each to start aligned; a layer whose blocks cannot (rows of an odd size, int4's grouped
    scales) stores each block's bytes on their own."""
    raw, w_stride, w_all = image
    oc = layer.weight.shape[0]
    if size >= oc:
        return [(Block(0, oc, -1, len(raw), w_stride, w_all), raw)]
    a = cfg.alignment
    vec_all = align(oc * 4, a)
    if layer.w4 or size * w_stride % a or size * 4 % a:
        out = []
        for oc0, oc1 in oc_blocks(oc, size):
            own, _, w_bytes = constant_bytes(cfg, layer, oc0, oc1)
            out.append((Block(oc0, oc1, -1, len(own), w_stride, w_bytes), own))
        return out
    rows = (len(raw) - w_all) // vec_all  # bias / scale rows: 0, 1 (fp16 bias) or 2 (int8, W8A16)
    out = []
    for oc0, oc1 in oc_blocks(oc, size):
        n = oc1 - oc0
        w_bytes, vec = align(n * w_stride, a), align(n * 4, a)
        # One load per row: a 2-row load's source footprint (rows x stride) would reach past the layer's
        # last row from any block but the first (docs/npu.md section 6).
        pieces = ((oc0 * w_stride, 0, n * w_stride),)
        pieces += tuple((w_all + r * vec_all + oc0 * 4, w_bytes + r * vec, n * 4) for r in range(rows))
        out.append((Block(oc0, oc1, -1, w_bytes + rows * vec, w_stride, w_bytes, pieces), raw))
    return out
