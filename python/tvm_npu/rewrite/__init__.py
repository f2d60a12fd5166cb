"""Stage 2 — graph rewrites before quantization and partitioning: uint8 QDQ tensors as int8 ones,
compute on constants folded, a dense layer's column split pushed into its weights, a split into halves
as two slices, casts to the dtype a tensor has already dropped, views as reshapes (a reshape of a
reshape as one), zero pads into conv padding, batch norm folded into convs, x * sigmoid(x) and the
decomposed tanh and erf GELUs as the one activation each is, the written-out RMSNorm as one rms_norm,
each GroupNorm form as a layer_norm of grouped rows, a division by a power of two as the multiply with
the same bits (after the fusions, whose recognizers read the divides as exported), a map's view as
tokens and back as the NPU's pixels-as-rows permute and a reshape, consecutive transposes as one and
attention's scale moved above its head split (so the split sits on the matmul that addresses it); last,
the run-time indices of every gather range-checked (check_indices). `run` applies them in the order of
`PASSES`; `partition.prepare` and the quantizer call it.

Frontends emit some ops the NPU has no command for but that disappear into a neighbour at compile
time; each rewrite, one per file, removes one kind, so the patterns match what the NPU runs instead of
leaving CPU islands that split the NPU region.
"""

import tvm
from tvm import relax

from .batch_norm import decompose_batch_norm, fold_batch_norm
from .check_indices import check_indices
from .compose_permutes import compose_permutes
from .compose_reshapes import compose_reshapes
from .divide_by_power_of_two import divide_by_power_of_two
from .fold_constants import fold_constant_compute
from .fuse_gelu_erf import fuse_gelu_erf
from .fuse_gelu_tanh import fuse_gelu_tanh
from .fuse_group_norm import fuse_group_norm
from .fuse_pad import fuse_pad_into_conv
from .fuse_rms_norm import fuse_rms_norm
from .fuse_silu import fuse_silu
from .identity_casts import identity_casts  # not in PASSES: see its docstring
from .repeated_constants import repeated_constants
from .scale_before_heads import scale_before_heads
from .split_dense_columns import split_dense_columns
from .split_halves import split_halves
from .tokens_view import tokens_view
from .uint8_as_int8 import uint8_as_int8
from .views import views_as_reshape

#: The rewrites of a plain-dataflow `main`, in the order `run` applies them, each `mod -> mod`.
PASSES = (
    uint8_as_int8,
    fold_constant_compute,
    repeated_constants,
    split_dense_columns,
    split_halves,
    views_as_reshape,
    compose_reshapes,
    fuse_pad_into_conv,
    fold_batch_norm,
    fuse_silu,
    fuse_gelu_tanh,
    fuse_gelu_erf,
    fuse_rms_norm,
    fuse_group_norm,
    divide_by_power_of_two,
    tokens_view,
    compose_permutes,
    scale_before_heads,
    check_indices,
)


def run(mod: tvm.IRModule) -> tvm.IRModule:
    """Apply `PASSES` in order, then decompose the batch norms no conv absorbed (after the fold, so
    it sees only those) and canonicalize bindings.

    Parameters
    ----------
    mod : tvm.IRModule
        A Relax module. When its `main` is not plain dataflow (e.g. control flow), a pass raises
        ValueError and none of `PASSES`' rewrites are kept; the batch norms are still decomposed.

    Returns
    -------
    tvm.IRModule
        The rewritten module, its bindings canonicalized.
    """
    try:
        rewritten = mod
        for rewrite in PASSES:
            rewritten = rewrite(rewritten)
        mod = rewritten
    except ValueError:  # main is not plain dataflow (e.g. control flow): rewrite nothing
        pass
    return relax.transform.CanonicalizeBindings()(decompose_batch_norm(mod))
