"""Part of stage 4 (plan): an elementwise row wider than max_width as several commands over column
slices (constraints.constraint_vector_width is the partition's side of this).

ADD, ELTWISE and UNARY compute each element of a row on its own, so a row of K > max_width elements
(a tensor stored as rows of its last axis, [1, R, 1, K], such as SD-1.5's GEGLU at K = 5120) is the same
result as commands over columns [e0, e1) of it, each at most max_width wide: every operand address
moves by e0 elements of its own dtype, strides stay (the rows are the same rows), a per-element b
(ELTWISE's per-channel b of a row) moves with them, a scalar b does not. Slice starts are multiples of
alignment bytes of the narrowest operand, so every moved address stays aligned.

A slice's footprint is rows x stride from its first byte (docs/npu.md section 6): it reaches up to a row
past the tensor it reads or writes. The planner reserves that row (planner._place, layer_plan._layout).
"""

from __future__ import annotations

from dataclasses import replace

from ...contract.config import NPUConfig
from ...contract.stream import B_MODES, DTYPE_BYTES, Command
from .sram import align

SLICED_KINDS = ("add", "eltwise", "unary")


def is_sliced(cfg: NPUConfig, layer, view: tuple) -> bool:
    """Whether `layer` (its output's [N, H, W, C] `view`) runs as column slices: a row wider than max_width."""
    return layer.kind in SLICED_KINDS and view[2] == 1 and view[3] > cfg.max_width


def _elems(layer) -> list:
    """Bytes per element of each operand (a, b, out): int8 ELTWISE operands may be int16 (format 1.2)."""
    if layer.kind == "eltwise" and layer.dtypes:
        return [DTYPE_BYTES[d] for d in layer.dtypes]
    return [DTYPE_BYTES[layer.dtype]] * 3


def column_slices(cfg: NPUConfig, layer, view: tuple) -> list:
    """[(e0, e1)] column slices of the row: [(0, K)] unless the layer is sliced, else slices of the
    largest multiple of the alignment unit that is at most max_width (the last one shorter)."""
    k = view[2] * view[3]
    if not is_sliced(cfg, layer, view):
        return [(0, k)]
    unit = max(1, cfg.alignment // min(_elems(layer)))
    step = cfg.max_width // unit * unit
    return [(e0, min(k, e0 + step)) for e0 in range(0, k, step)]


def slice_command(cfg: NPUConfig, layer, cmd: Command, e0: int, e1: int) -> Command:
    """`cmd` (a whole-row ADD / ELTWISE / UNARY of one tile) restricted to columns [e0, e1)."""
    a, (ea, eb, eo) = dict(cmd.args), _elems(layer)
    a["row_elems"] = e1 - e0
    a["out_addr"] += e0 * eo
    if cmd.op == "UNARY":  # an int8 table is the same for every element
        a["in_addr"] += e0 * ea
        return replace(cmd, args=a)
    a["a_addr"] += e0 * ea
    if cmd.op == "ADD" or a["b_mode"] == B_MODES["same"]:
        a["b_addr"] += e0 * eb
    elif a["b_mode"] == B_MODES["channel"]:  # W = 1: b is one element per column of the row
        a["b_addr"] += e0 * eb
        a["channels"] = e1 - e0
        a["b_stride"] = align((e1 - e0) * eb, cfg.alignment)  # its one row, not reaching past the slice
    return replace(cmd, args=a)
