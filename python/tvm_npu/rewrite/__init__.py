"""Stage 2 — graph rewrites before quantization and partitioning: batch norm folded into convs, zero
pads into conv padding, views as reshapes, a dense layer's column split pushed into its weights,
compute on constants folded. `run` applies them in order.
"""

from .passes import (decompose_batch_norm, fold_batch_norm, fold_constant_compute, fuse_pad_into_conv, run,
                     split_dense_columns, views_as_reshape)
