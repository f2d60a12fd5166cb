"""Stage 4b — tiling: how a layer's output is split into row tiles and output-channel blocks.

A tile is a band of output rows of one image; its input slice follows from the kernel, stride,
dilation and padding (docs/npu.md section 4: rows before the slice are virtual padding, rows past it
read as zero). Output-channel blocks let a dense layer whose weights exceed SRAM stream them in pieces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..lower.graph import Layer


@dataclass(frozen=True)
class Tile:
    n: int
    out_r0: int
    out_r1: int
    in_r0: int
    in_r1: int
    pad_top: int

    @property
    def out_rows(self) -> int:
        return self.out_r1 - self.out_r0

    @property
    def in_rows(self) -> int:
        return self.in_r1 - self.in_r0


def row_tiles(layer: Layer, in_view: tuple, out_view: tuple, tile_oh: int) -> list[Tile]:
    """Row tiles of about `tile_oh` output rows over every image of the batch.

    A tile must start with a real input row: the kernel can put virtual padding only above its slice
    (docs/npu.md section 4), so output rows that read nothing but bottom padding join the tile before.
    """
    kh, sh, dh, pad_top = layer.taps
    tiles = []
    for n in range(out_view[0]):
        starts = [r0 for r0 in range(0, out_view[1], tile_oh) if r0 == 0 or r0 * sh - pad_top < in_view[1]]
        for i, r0 in enumerate(starts):
            r1 = starts[i + 1] if i + 1 < len(starts) else out_view[1]
            first = r0 * sh - pad_top
            last = (r1 - 1) * sh - pad_top + (kh - 1) * dh  # inclusive
            in_r0 = max(0, first)
            in_r1 = max(in_r0 + 1, min(in_view[1], last + 1))
            tiles.append(Tile(n, r0, r1, in_r0, in_r1, in_r0 - first))
    return tiles


def tile_heights(out_h: int) -> list[int]:
    """Candidate tile heights, largest first: the whole map, then ever finer even splits."""
    splits = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
    return sorted({math.ceil(out_h / k) for k in splits if k <= out_h} | {1}, reverse=True)


def oc_blocks(oc: int, block: int) -> list[tuple[int, int]]:
    """[oc0, oc1) blocks of at most `block` output channels."""
    return [(c, min(oc, c + block)) for c in range(0, oc, block)]
