"""The numpy reference model of the NPU that every test compares with, written from docs/npu.md (the
hardware contract), not from tvm_npu's code or the C++ reference NPU.

Reference kernels in XNNPACK's sense: complete and simple, not designed to be fast (numpy vectorizes over
the pixels of a tile where that keeps the tests quick, never across an fp32 sum whose order is defined).
Each function's docstring names the part of section 2 it implements.

- `fp16`   the float datapath: CONV2D (dense and depthwise), ADD, POOL, ELTWISE, the bit-exact UNARY
           functions; `conv2d_nchw`, `dense`, `pool_nchw` for whole Relax models.
- `int8`   the integer datapath: requantization, rshift_rne, CONV2D, ADD, POOL, ELTWISE with int8 / int16
           operands, UNARY tables, quantized staging; the compiler's scales, multipliers and clamps.
- `int4`   group-wise int4 weights (CONV2D's `w_dtype`, format 1.4): W4A16, W4A8, the packed layouts.
- `exact`  the float64 functions UNARY's and SOFTMAX's 1-ulp guarantees are stated against; fp16_ulps.
- `window` out_size, and the taps of a CONV2D / POOL window that fall inside the input (section 4).
- `qdq`    QDQInterpreter: runs an onnxruntime QDQ model with the integer datapath.
"""

from . import exact, fp16, int4, int8, qdq, window
from .qdq import QDQInterpreter
from .window import out_size

__all__ = ["QDQInterpreter", "exact", "fp16", "int4", "int8", "out_size", "qdq", "window"]
