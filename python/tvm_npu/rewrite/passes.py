"""The name the rewrites had before they were split one per file: `partition.partitioner` and
`quantization.ptq` still import ``rewrite.passes`` for `run`. Import `tvm_npu.rewrite` instead; this
module goes once they do.
"""

from . import (  # noqa: F401 (re-exports)
    PASSES,
    decompose_batch_norm,
    fold_batch_norm,
    fold_constant_compute,
    fuse_pad_into_conv,
    run,
    split_dense_columns,
    views_as_reshape,
)
