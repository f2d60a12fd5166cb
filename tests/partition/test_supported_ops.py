"""SUPPORTED_OPS.md is generated from the pattern table and the constraint docstrings, and kept current."""

import inspect
from pathlib import Path

from tvm_npu.partition import attributes as A
from tvm_npu.partition import checks as checks_module
from tvm_npu.partition import constraints as C
from tvm_npu.partition import patterns
from tvm_npu.partition import resize_constraints as RC
from tvm_npu.partition import transformer_constraints as TC
from tvm_npu.tools import supported_ops

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "regenerate it with: python -m tvm_npu.tools.supported_ops > SUPPORTED_OPS.md"


def test_supported_ops_md_is_current():
    path = ROOT / "SUPPORTED_OPS.md"
    assert path.exists(), f"SUPPORTED_OPS.md is missing; {REGENERATE}"
    assert path.read_text() == supported_ops.render(), f"SUPPORTED_OPS.md is stale; {REGENERATE}"


def _names(fn) -> set:
    """The names a check's code uses, with those of the `_check_*` helpers it shares with other checks."""
    names = set(fn.__code__.co_names)
    for helper in [n for n in names if n.startswith("_check_")]:
        names |= _names(getattr(checks_module, helper))
    return names


def _called_constraints(fn, anchor_ops=()) -> set:
    """The constraints `fn`'s code names, with the attribute table's for `anchor_ops` when it runs
    `attribute_checks` (the table names them, not the code)."""
    called = {
        getattr(C, n, None) or getattr(TC, n, None) or getattr(RC, n) for n in _names(fn) if n.startswith("constraint_")
    }
    if "attribute_checks" in _names(fn):
        called |= {c for op in anchor_ops for c in A.attribute_constraints(op)}
    return called


def test_declared_constraints_are_the_ones_each_check_runs():
    """The applies(...) list of every check names exactly the constraints its code calls (so the
    generated file cannot drift from what the partitioner does)."""
    # patterns._whole wraps every check in a structural test (no intermediate read outside the match).
    checks = {inspect.unwrap(check) for _, _, _, check in supported_ops.pattern_table()}
    assert {c.__name__ for c in checks} >= {"check_conv2d", "check_dense", "check_add", "check_pool", "check_reshape"}
    quant = _called_constraints(checks_module._quant_checks)
    assert quant == set(checks_module.QUANT_WEIGHT_CONSTRAINTS)
    for check in checks:
        declared, int8 = set(check.constraints), set(check.int8_constraints)
        anchors = {op for f in supported_ops.families() if f["family"] == check.__name__[6:] for op in f["anchor_ops"]}
        body = _called_constraints(check, anchors)
        assert "_quant_checks" in _names(check)
        assert declared | (int8 - quant) == body, check.__name__
        assert int8 & quant in (set(checks_module.QUANT_CONSTRAINTS), set(checks_module.QUANT_WEIGHT_CONSTRAINTS)), (
            check.__name__
        )
        assert not declared & int8, check.__name__
        # Weighted ops (conv2d, dense) add the symmetric-weight check, as _quant_checks does.
        has_weight = check.__name__ in ("check_conv2d", "check_dense")
        assert (C.constraint_symmetric_weights in int8) == has_weight, check.__name__


def test_every_constraint_is_documented_with_a_reason_code():
    in_module = set()
    for module in (C, TC, RC):
        mine = {f for n, f in vars(module).items() if n.startswith("constraint_") and f.__module__ == module.__name__}
        assert mine == set(module.ALL_CONSTRAINTS), module.__name__
        in_module |= mine
    used = set()
    for family in supported_ops.families():
        used |= set(family["constraints"])
    assert used == in_module  # no constraint is left out of the generated table
    text = supported_ops.render()
    for c in in_module:
        assert C.reason_code(c).startswith("NPU_E_"), c.__name__
        assert f"`{C.reason_code(c)}` | {C.reason_text(c)} |" in text


def test_every_registered_composite_is_listed():
    patterns.register()
    registered = {p.name for p in patterns.npu_patterns()}
    listed = {name for f in supported_ops.families() for name in f["composites"]}
    assert registered == listed
    families = {(f["family"], f["datapath"]) for f in supported_ops.families()}
    assert families >= {(name, dp) for name in ("conv2d", "dense", "add", "pool", "reshape") for dp in ("fp16", "int8")}
    text = supported_ops.render()
    assert "## conv2d (int8)" in text and "`relax.nn.conv2d`" in text and "`npu.qconv2d_bias_relu`" in text


def test_building_does_not_grow_the_pattern_registry(rng):
    # TVM's registry appends: registering on every partition made each build slower than the last.
    import tvm_npu
    from builders import chain, conv_layer

    patterns.register()
    before = len(patterns.npu_patterns())
    for _ in range(3):
        tvm_npu.build(chain((1, 4, 8, 8), [conv_layer(rng, 4, 8, 3)]))
    assert len(patterns.npu_patterns()) == before == len(patterns.table())
