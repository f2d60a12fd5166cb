"""Stage 2 — patterns: the NPU's pattern table, registered under the "npu." prefix.

Each entry is (composite name, Relax dataflow pattern, annotations, check). The composite names are the
contract with codegen (`lower.py` reads them); the checks run the `constraint_*` functions of
`constraints.py`, whose docstrings are the reasons a user reads when an op stays on the CPU.
"""

from __future__ import annotations

from tvm.relax.backend.pattern_registry import get_patterns_with_prefix, register_patterns
from tvm.relax.dpl import is_const, is_op, wildcard

from . import constraints as C

PREFIX = "npu"

ACTIVATIONS = ("relu", "clip")


def _activation(pattern, act: str):
    if act == "relu":
        return is_op("relax.nn.relu")(pattern)
    if act == "clip":
        return is_op("relax.clip")(pattern, wildcard(), wildcard())
    return pattern


def _variants(base_name: str, root, annotations: dict, check):
    """root, root+bias, root+act, root+bias+act — smallest first, so larger ones get priority."""
    out = []
    for with_bias in (False, True):
        for act in (None,) + ACTIVATIONS:
            pat, ann = root, dict(annotations)
            name = base_name
            if with_bias:
                ann["bias"] = bias = is_const()
                pat = is_op("relax.add")(pat, bias)
                name += "_bias"
            if act:
                pat = _activation(pat, act)
                ann["act"] = pat
                name += f"_{act}"
            ann["root"] = pat
            out.append((f"{PREFIX}.{name}", pat, ann, check))
    # Order by number of fused ops, ascending: register_patterns gives later entries priority.
    return sorted(out, key=lambda e: e[0].count("_"))


def conv2d_patterns():
    data, weight = wildcard(), is_const()
    conv = is_op("relax.nn.conv2d")(data, weight)
    return _variants("conv2d", conv, {"data": data, "weight": weight, "op": conv}, C.check_conv2d)


def matmul_patterns():
    data, weight = wildcard(), is_const()
    # ONNX Gemm / nn.Linear give matmul(x, permute_dims(W)); FoldConstant usually folds the transpose.
    transposed = is_op("relax.permute_dims")(weight)
    mm = is_op("relax.matmul")(data, weight | transposed)
    return _variants("dense", mm, {"data": data, "weight": weight, "op": mm}, C.check_dense)


def register():
    """Register the table (idempotent: re-registering replaces the entries of the same name)."""
    register_patterns(conv2d_patterns() + matmul_patterns())


def npu_patterns():
    """Registered NPU patterns, highest priority first (the order FuseOpsByPattern wants)."""
    return get_patterns_with_prefix(PREFIX)
