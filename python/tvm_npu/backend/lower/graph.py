"""What lowering produces and the planner reads: a region's tensors (`TensorInfo`), its NPU layers
(`Layer`) and the region itself (`Graph`); and the device view [N, H, W, C] of a host tensor."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...ir.graph import brief


@dataclass
class TensorInfo:
    """A tensor of the region: its host form and its device view [N, H, W, C]."""

    name: str
    host_shape: tuple
    host_layout: str  # NCHW, NHWC or ROWS (docs/npu.md section 6)
    view: tuple
    dtype: str = "float16"  # on the device
    host_dtype: str = "float32"
    # Quantized staging (int8 / int16 on the device, float32 on the host; format 1.3): scale, zero point
    qparams: tuple | None = None


@dataclass
class Layer:
    """One NPU op: "conv" (MAC array; dense is a 1x1 conv over [1, M, 1, K]), "matmul" (MAC array, two
    activations, rows views [1, batch * rows, 1, cols]), "add", "pool", "eltwise",
    "unary", "softmax", "norm" or "rope" (vector), "view" (a reshape that keeps the stored rows: its output aliases its
    input, no command) or "concat" (its inputs are written into its channels or rows, no command;
    slices.py)."""

    name: str
    composite: str
    kind: str
    dtype: str  # "float16" or "int8" (the integer datapath; its tensors may be int8 or int16)
    inputs: list = field(default_factory=list)
    out: str = ""
    weight: np.ndarray | None = None  # [OC, KH, KW, IC/groups]
    bias: np.ndarray | None = None  # fp32 or int32 [OC]
    groups: int = 1
    window: tuple = (1, 1)  # pool window
    pool_kind: str = "avg"
    stride: tuple = (1, 1)
    dilation: tuple = (1, 1)
    padding: tuple = (0, 0, 0, 0)  # top, left, bottom, right
    act: str = "none"
    clip: tuple = (0.0, 0.0)
    # int8 only (docs section 2): zero points, multipliers, shift(s), clamp.
    in_zps: tuple = ()
    out_zp: int = 0
    scale: np.ndarray | None = None  # fp32 requantization scales: [OC] for conv, [1] for pool; W8A16's weight scales
    mult: np.ndarray | None = None  # add: integer multipliers of both inputs, and one shift
    shift: int = 0
    clamp: tuple = (-128, 127)
    macs: int = 0
    out_elems: int = 0
    # Group-wise int4 weights (format 1.4, CONV2D w_dtype int4 / uint4): `weight` holds the codes (int8,
    # -8..7 or 0..15), one fp16 scale [G][OC] and (uint4) one zero point [G][OC] per `w_group` weights of K.
    w_group: int = 0
    w_scales: np.ndarray | None = None
    w_zeros: np.ndarray | None = None
    # concat: each input's first channel in the output (rows: first row); view (rows): its first row.
    offsets: tuple = ()
    rows: bool = False
    # eltwise / unary (docs/npu.md section 6): the op ("add", "sigmoid", ...), b's broadcast mode, the
    # constant the command reads from the weight region (b, or the int8 table), leaky relu's slope.
    func: str = ""
    b_mode: str = "same"
    const: np.ndarray | None = None
    alpha: float = 0.0
    # integer eltwise: the dtypes of a, b and the result ("int8" or "int16", format 1.2)
    dtypes: tuple = ()
    # softmax (format 1.4): the fp32 factor on x (0: none); its mask rows [R, E] fp16 are `const`
    softmax_scale: float = 0.0
    # norm ("layernorm" / "rmsnorm" in `func`, eps in `alpha`): the rows of `const`, "gamma" then "beta"
    norm_params: tuple = ()
    # matmul (MATMUL, format 1.4): (batch, m, k, n, b_transposed), and the B batch each output batch reads
    matmul: tuple = ()
    b_index: tuple = ()
    # matmul heads (format 1.8): H for each of A, B and the output that is a head slice of [B, S, H * D]
    # rows (its tensor is those rows: batch o = b * H + h at row b * S, column h * D), else 0
    heads: tuple = (0, 0, 0)
    # rope (ROPE, format 1.4): the cos / sin table's rows; x's row r reads row r % rope_rows
    rope_rows: int = 0

    @property
    def taps(self) -> tuple:
        """(kh, stride_h, dil_h, pad_top): the row geometry tiling needs."""
        if self.kind == "conv":
            kh = self.weight.shape[1]
        else:
            kh = self.window[0]
        return kh, self.stride[0], self.dilation[0], self.padding[0]

    @property
    def w8a16(self) -> bool:
        """A float conv / dense whose weights stay int8 codes, `scale` their per-channel fp32 scales
        (CONV2D's w_dtype, format 1.4): 1 byte a weight in the weight region and on the DMA."""
        return (
            self.kind == "conv"
            and self.dtype == "float16"
            and self.weight is not None
            and self.weight.dtype == np.int8
            and not self.w_group
        )

    @property
    def w4(self) -> str | None:
        """A dense with group-wise int4 weights: its w_dtype name, "int4" (symmetric) or "uint4" (with zero
        points); None otherwise. Half a byte a weight in the weight region and on the DMA."""
        if not self.w_group:
            return None
        return "int4" if self.w_zeros is None else "uint4"


@dataclass
class Graph:
    """A lowered NPU region."""

    symbol: str
    inputs: list = field(default_factory=list)  # tensor names, in argument order
    outputs: list = field(default_factory=list)
    tensors: dict = field(default_factory=dict)  # name -> TensorInfo
    layers: list = field(default_factory=list)
    var_names: dict = field(default_factory=dict)  # relax.Var -> tensor name
    # (role, index) of a region input / output staged with quantization -> its host form (TensorInfo)
    staged: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The region's name in messages (see `brief`)."""
        return brief(self.symbol)


# --- device views (docs/npu.md section 3) -----------------------------------------------------------


def conv_view(shape, layout: str) -> tuple:
    """[N, H, W, C] of a feature map in `layout` (NCHW or NHWC)."""
    return tuple(shape[layout.index(d)] for d in "NHWC")


def rows_view(shape) -> tuple:
    """[1, rows, 1, K]: a tensor of another rank, as rows of its last dimension."""
    return (1, int(np.prod(shape[:-1])), 1, shape[-1])
