"""The forms GroupNorm arrives in, one recognizer per file; `rewrite/fuse_group_norm.py` tries them in
the order of `FORMS`, each over every binding, and writes each match as the NPU's layer_norm over
grouped rows.

Each recognizer is ``match(g, var, value) -> GroupNormMatch | None``: it reads the chain ending at
binding `var` and returns what it computes only when that is GroupNorm exactly (same eps, same axes,
biased variance); a near miss returns None and stays as it is.
"""

from .channels_by_length import match as channels_by_length
from .common import GroupNormMatch
from .group_norm_op import match as group_norm_op
from .instance_norm import match as instance_norm
from .written_out import match as written_out

#: (name, recognizer): (d) a 3-D [N, C, L] one with its affine (first: it contains an (a) or (b)), (a)
#: written out, (b) InstanceNormalization on a reshape, (c) relax.nn.group_norm.
FORMS = (
    ("channels_by_length", channels_by_length),
    ("written_out", written_out),
    ("instance_norm", instance_norm),
    ("group_norm_op", group_norm_op),
)

__all__ = ["FORMS", "GroupNormMatch"]
