"""MatMulNBits (com.microsoft): its converter is frontend/blockwise.py's (``Y = A @ dequantize(B).T + bias``,
4 or 8 bits, any power-of-two block >= 16, packed or float zero points or none); this is its entry in the
contrib table, so its attributes and inputs are checked like the other contrib ops'."""

from __future__ import annotations

from ..onnx_attributes import OnnxOp, imported, refused
from .registry import MS_DOMAIN, contrib_op

SPEC = OnnxOp(
    ("relax.astype", "relax.subtract", "relax.multiply", "relax.matmul", "relax.add"),
    {
        "K": imported("the input features (B's codes along K, the last block padded)"),
        "N": imported("the output features"),
        "bits": imported("4 or 8 (others ERR_OP_NOT_SUPPORTED)"),
        "block_size": imported("a power of two >= 16 (else ERR_INVALID_MODEL)"),
        "accuracy_level": imported("onnxruntime's lowest allowed compute precision; the import computes in float32"),
        "weight_prepacked": refused(
            "refused: B is in one onnxruntime kernel's prepacked layout; export the unpacked weight", lambda v: v != 0
        ),
    },
    {
        "A": imported("the activations [..., K]"),
        "B": imported("uint8 [N, blocks, block_size * bits / 8], low bits first along K"),
        "scales": imported("[N * blocks] (or [N, blocks]) of A's type"),
        "zero_points": imported(
            "packed uint8 [N, ceil(blocks * bits / 8)] or A's type [N, blocks]; absent: 2^(bits-1)"
        ),
        "g_idx": refused("refused: act-order group indices (a per-K group map); quantize without act order"),
        "bias": imported("[N], added after the matmul"),
    },
    {"Y": imported("[..., N]")},
)

contrib_op(MS_DOMAIN, "MatMulNBits", SPEC)(None)
