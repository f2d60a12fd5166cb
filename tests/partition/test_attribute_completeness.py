"""Every attribute of every op the pattern table claims is in the attribute table (issue 19): read from
TVM (the attrs node of a constructed call) and from ONNX (every version of the op's schema), so a new
TVM or ONNX attribute fails here until the table says what the NPU does with it."""

import numpy as np
import onnx.defs
import pytest
import tvm_ffi
from tvm import relax

from tvm_npu.frontend import onnx_attributes as OA
from tvm_npu.partition import attributes as A
from tvm_npu.tools import supported_ops

R = relax.op


def _tensor(name, shape, dtype="float32"):
    return relax.Var(name, relax.TensorType(shape, dtype))


X4, W4, M, Q = (
    _tensor("x", (1, 4, 8, 8)),
    _tensor("w", (4, 4, 3, 3)),
    _tensor("m", (8, 8)),
    _tensor("q", (8, 8), "int8"),
)
G = _tensor("g", (8,))
ONE, ZERO = relax.const(1.0, "float32"), relax.const(0, "int8")

# One call of each claimed op, for its attrs node (TVM has no registered attrs type for some ops).
CALLS = {
    "relax.nn.conv2d": lambda: R.nn.conv2d(X4, W4),
    "relax.matmul": lambda: R.matmul(M, M),
    "relax.nn.max_pool2d": lambda: R.nn.max_pool2d(X4),
    "relax.nn.avg_pool2d": lambda: R.nn.avg_pool2d(X4),
    "relax.mean": lambda: R.mean(X4, [2, 3], True),
    "relax.image.resize2d": lambda: R.image.resize2d(X4, (16, 16), method="nearest_neighbor"),
    "relax.nn.softmax": lambda: R.nn.softmax(M),
    "relax.nn.layer_norm": lambda: R.nn.layer_norm(M, G, G, axes=[-1]),
    "relax.nn.rms_norm": lambda: R.nn.rms_norm(M, G, axes=[-1]),
    "relax.nn.leakyrelu": lambda: R.nn.leakyrelu(M, 0.1),
    "relax.concat": lambda: R.concat([M, M]),
    "relax.strided_slice": lambda: R.strided_slice(M, [0], [0], [4]),
    "relax.permute_dims": lambda: R.permute_dims(M),
    "relax.quantize": lambda: R.quantize(M, ONE, ZERO, out_dtype="int8"),
    "relax.dequantize": lambda: R.dequantize(Q, ONE, ZERO),
    "relax.add": lambda: R.add(M, M),
    "relax.subtract": lambda: R.subtract(M, M),
    "relax.multiply": lambda: R.multiply(M, M),
    "relax.divide": lambda: R.divide(M, M),
    "relax.maximum": lambda: R.maximum(M, M),
    "relax.minimum": lambda: R.minimum(M, M),
    "relax.nn.relu": lambda: R.nn.relu(M),
    "relax.clip": lambda: R.clip(M, 0, 6),
    "relax.sigmoid": lambda: R.sigmoid(M),
    "relax.tanh": lambda: R.tanh(M),
    "relax.nn.gelu": lambda: R.nn.gelu(M),
    "relax.nn.gelu_tanh": lambda: R.nn.gelu_tanh(M),
    "relax.nn.silu": lambda: R.nn.silu(M),
    "relax.reshape": lambda: R.reshape(M, (4, 16)),
    "relax.broadcast_to": lambda: R.broadcast_to(M, (2, 8, 8)),
    "relax.negative": lambda: R.negative(M),
    "relax.astype": lambda: R.astype(M, "float16"),
    "relax.take": lambda: R.take(M, relax.const(np.zeros(2, "int64")), axis=1),
}


def relax_fields(op: str) -> list:
    """The fields of `op`'s attrs node, by reflection (tvm-ffi's type info)."""
    call = CALLS[op]()
    assert call.op.name == op
    if call.attrs is None:
        return []
    info = tvm_ffi.core._lookup_or_register_type_info_from_type_key(call.attrs.__tvm_ffi_type_info__.type_key)
    return [f.name for f in info.fields]


def claimed_relax_ops() -> set:
    ops = set()
    for _, pattern, _, _ in supported_ops.pattern_table():
        ops |= set(supported_ops.pattern_ops(pattern))
    return ops


def test_the_table_covers_exactly_the_claimed_relax_ops():
    assert claimed_relax_ops() == set(A.RELAX_ATTRS) == set(CALLS)
    assert set(A.RELAX_INPUTS) <= set(A.RELAX_ATTRS)


@pytest.mark.parametrize("op", sorted(A.RELAX_ATTRS))
def test_every_relax_attribute_is_handled_or_rejected(op):
    fields = relax_fields(op)
    missing = [f for f in fields if f not in A.RELAX_ATTRS[op]]
    assert not missing, f"{op}: attributes {missing} are neither run exactly nor refused (partition/attributes.py)"
    stale = [f for f in A.RELAX_ATTRS[op] if f not in fields]
    assert not stale, f"{op}: the table names {stale}, which TVM's attrs node no longer has"


def test_attribute_constraints_are_the_ones_their_family_runs():
    """An entry's constraint must be one that the check of every family anchored on the op runs: a
    constraint no check runs would refuse nothing."""
    for family in supported_ops.families():
        runs = set(family["constraints"])
        for op in family["anchor_ops"]:
            for name, attr in {**A.RELAX_ATTRS[op], **A.RELAX_INPUTS.get(op, {})}.items():
                if attr.check is not None:
                    assert attr.check in runs, (family["family"], op, name)
                if attr.via and op not in ("relax.reshape", "relax.quantize", "relax.dequantize"):
                    assert set(attr.via) & runs, (family["family"], op, name)


def _schemas(op: str) -> list:
    return [s for s in onnx.defs.get_all_schemas_with_history() if s.name == op and s.domain == ""]


OPTIONAL = onnx.defs.OpSchema.FormalParameterOption.Optional


@pytest.mark.parametrize("op", sorted(OA.ONNX_OPS))
def test_every_onnx_attribute_and_optional_input_is_handled_or_rejected(op):
    entry = OA.ONNX_OPS[op]
    schemas = _schemas(op)
    assert schemas and onnx.defs.get_schema(op).since_version == max(s.since_version for s in schemas)
    attrs = {a for s in schemas for a in s.attributes}
    inputs = {i.name for s in schemas for i in s.inputs if i.option == OPTIONAL}
    outputs = {o.name for s in schemas for o in s.outputs if o.option == OPTIONAL}
    assert not attrs - set(entry.attrs), f"{op}: attributes {attrs - set(entry.attrs)} not in onnx_attributes.py"
    assert not inputs - set(entry.inputs), f"{op}: optional inputs {inputs - set(entry.inputs)} not in the table"
    assert not outputs - set(entry.outputs), f"{op}: optional outputs {outputs - set(entry.outputs)} not in the table"
    assert set(entry.attrs) <= attrs and set(entry.inputs) <= inputs and set(entry.outputs) <= outputs
    for handling in [*entry.attrs.values(), *entry.inputs.values(), *entry.outputs.values()]:
        if handling.becomes:
            relax_op, name = handling.becomes
            known = {**A.RELAX_ATTRS.get(relax_op, {}), **A.RELAX_INPUTS.get(relax_op, {})}
            # "bias": the add a conv / Gemm fuses, judged by the bias constraint of its family
            assert name in known or (relax_op == "relax.add" and name == "bias"), (op, handling.becomes)
    assert set(entry.relax) <= set(A.RELAX_ATTRS), op


def test_every_claimed_relax_op_comes_from_some_onnx_op():
    reached = {r for e in OA.ONNX_OPS.values() for r in e.relax}
    assert set(A.RELAX_ATTRS) <= reached


def test_attribute_checks_run_the_table():
    """The checks take the attribute constraints from the table: CONV_ATTRS is the table's list."""
    from tvm_npu.partition import checks

    assert list(checks.CONV_ATTRS) == A.attribute_constraints("relax.nn.conv2d")
    call = CALLS["relax.nn.softmax"]()
    assert [c for c, _ in A.attribute_checks(call)] == A.attribute_constraints("relax.nn.softmax")


def test_supported_ops_lists_the_attribute_values():
    text = supported_ops.render()
    for op, attrs in A.RELAX_ATTRS.items():
        for name, attr in attrs.items():
            assert f"| `{op}` | {name} | {attr.npu} |" in text, (op, name)
    for op in OA.ONNX_OPS:
        assert f"### {op}" in text
