"""GroupNorm (com.microsoft): onnxruntime's fused GroupNorm of diffusion models (its transformer
optimizer writes it for Stable Diffusion's UNet and VAE), ``Y = act(GroupNorm(X, groups) * gamma +
beta)`` with X NHWC (``channels_last`` 1, the default) or NCHW (0) and act SiLU (``activation`` 1) or
none (0). Imported as ``relax.nn.group_norm`` on the NCHW tensor (X permuted to it and back when it is
NHWC), then ``relax.nn.silu``: rewrite/fuse_group_norm.py then writes the group_norm as a layer_norm of
grouped rows like every other GroupNorm form. onnxruntime implements the op on CUDA / ROCm only; the
import follows its definition: mean and biased variance over each group's C / groups channels and all
pixels, epsilon under the root."""

from __future__ import annotations

from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from ...contract.errors import NPUError
from ..onnx_attributes import OnnxOp, imported, refused
from ._common import require_float32, shape_of, where
from .registry import MS_DOMAIN, contrib_op

SPEC = OnnxOp(
    ("relax.nn.group_norm", "relax.nn.silu", "relax.permute_dims"),
    {
        "activation": refused("0 (none) or 1 (SiLU after the norm)", lambda v: v not in (0, 1), "ERR_OP_NOT_SUPPORTED"),
        "channels_last": refused("1 (NHWC X, the default) or 0 (NCHW)", lambda v: v not in (0, 1), "ERR_INVALID_MODEL"),
        "epsilon": imported("group_norm's epsilon, under the root (default 1e-5)"),
        "groups": imported("num_groups: it must divide the channels"),
    },
    {"X": imported("float32, rank 4"), "gamma": imported("[C] scale"), "beta": imported("[C] shift")},
    {"Y": imported("the normalized X, activated, in X's layout")},
)


@contrib_op(MS_DOMAIN, "GroupNorm", SPEC)
class GroupNorm(onnx_frontend.OnnxOpConverter):
    """GroupNorm over NHWC or NCHW X, float32, SiLU or no activation."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        place = where("GroupNorm", attr)
        x, gamma, beta = inputs[0], inputs[1], inputs[2]
        for what, e in (("input X", x), ("gamma", gamma), ("beta", beta)):
            require_float32(e, what, place)
        shape = shape_of(x, "input", place)
        last = int(attr.get("channels_last", 1)) == 1
        groups = int(attr.get("groups", 0))
        channels = shape[-1] if last else shape[1] if len(shape) > 1 else 0
        if len(shape) != 4:
            raise NPUError("ERR_INVALID_MODEL", f"{place}: X is {shape}; GroupNorm takes a rank-4 X")
        if groups <= 0 or channels % groups:
            raise NPUError("ERR_INVALID_MODEL", f"{place}: groups {groups} does not divide the {channels} channels")
        for what, e in (("gamma", gamma), ("beta", beta)):
            if shape_of(e, what, place) != [channels]:
                raise NPUError("ERR_INVALID_MODEL", f"{place}: {what} is not [{channels}] (one per channel)")
        if last:
            x = relax.op.permute_dims(x, [0, 3, 1, 2])
        eps = float(attr.get("epsilon", 1e-5))
        y = relax.op.nn.group_norm(x, gamma, beta, groups, channel_axis=1, axes=[2, 3], epsilon=eps)
        if int(attr.get("activation", 0)) == 1:
            y = relax.op.nn.silu(y)
        return relax.op.permute_dims(y, [0, 2, 3, 1]) if last else y
