"""Differential graph fuzzing, the bounded CI profile (tests/graph_fuzz.py has the generator and the
oracles; benchmarks/fuzz_graphs.py runs long campaigns, docs/reliability.md records them).

Random ONNX DAGs of supported ops (with transposes and sines that stay on the CPU, strides of 3 that
fall back, tensors and weights larger than npu-small's SRAM) are compiled for the NPU and compared with
TVM's llvm build (fp16, norm-relative bound) or the numpy int8 reference (bit for bit). The families
of tests/graph_fuzz_families.py add shape computations, constants in every operand position, symbolic
dimensions and edge-case ops. A documented compile-time refusal (ERR_SRAM_OVERFLOW,
ERR_TASK_TOO_COMPLEX) is an accepted answer; a wrong result, any other error, or a region that fell
back with NPU_E_INTERNAL fails. derandomize=True: CI runs the same
graphs every time. Every bug the fuzzer found is a spec in REGRESSIONS."""

import pytest
from hypothesis import HealthCheck, given, settings

import graph_fuzz
import graph_fuzz_families

PROFILE = settings(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

REGRESSIONS = {
    # A dead concat (its result unused) was matched into an NPU region; rebuilding main dropped the
    # dead call but kept the region function, and TVM's VM lowering failed on the composite nested
    # in it ("VMShapeLower do not work for local functions").
    "dead_npu_op": {
        "dtype": "int8",
        "config": "npu-small",
        "seed": 1,
        "input": [1, 8, 17, 1],
        "nodes": [
            ["unary", [0], {"kind": "LeakyRelu"}],
            ["concat", [0, 1], {"axis": 1}],
            ["unary", [1], {"kind": "Sigmoid"}],
        ],
        "outputs": [3],
    },
    # A dense + bias + relu matched as one composite while the value before the relu was read by a
    # softmax too: the composite returned both (a tuple), which an NPU command cannot write; lowering
    # refused the region (ERR_OP_NOT_SUPPORTED "unexpected binding") or, when the region-size pass
    # looked at it first, crashed ("'TupleGetItem' object has no attribute 'op'").
    "leaking_intermediate": {
        "dtype": "fp16",
        "config": "npu-ref",
        "seed": 1,
        "input": [3, 5],
        "nodes": [
            ["gemm", [0], {"n": 4, "bias": True, "transB": True, "act": None}],
            ["unary", [1], {"kind": "Relu"}],
            ["softmax", [1], {}],
        ],
        "outputs": [2, 3],
    },
    # Not a compiler bug, one in the fuzzer's int8 oracle: quantize_static quantized nothing here (a
    # lone Flatten), so the "int8" graph was a float graph run in fp16, judged as if bit-exact int8.
    "float_output_of_an_int8_graph": {
        "dtype": "int8",
        "config": "npu-small",
        "seed": 1,
        "input": [1, 4, 1, 1],
        "nodes": [["flatten", [0], {}]],
        "outputs": [1],
    },
    # An int8 add of a tensor and a dequantized constant of the same shape ([1, 16, 1, 1] after a
    # global pool) was taken by the two-tensor ADD entry: its same-shape check saw the dequantize, not
    # the constant behind it, and lowering failed ("'GenericConst' object has no attribute 'name'").
    "int8_add_of_a_same_shape_constant": {
        "dtype": "int8",
        "config": "npu-small",
        "seed": 496,
        "input": [1, 16, 16, 17],
        "nodes": [
            ["gap", [0], {}],
            ["binary", [1], {"kind": "Add", "operand": "channel", "const_first": True}],
            ["concat", [2, 1], {"axis": 1}],
        ],
        "outputs": [3],
    },
    # The fp16 oracle's own false alarm: a single dot product of 132 terms close to 0 (1e-4 off, 7%
    # of the result): the error of a rounded sum scales with its terms, not with its result.
    "cancelling_dot_product": {
        "dtype": "fp16",
        "config": "npu-small",
        "seed": 0,
        "input": [2, 132],
        "nodes": [
            ["slice", [0], {"start": 0, "stop": 1}],
            ["gemm", [1], {"n": 1, "bias": False, "transB": False, "act": "Relu"}],
            ["binary", [1, 1], {"kind": "Min", "operand": "tensor", "const_first": False}],
            ["binary", [1, 1], {"kind": "Max", "operand": "tensor", "const_first": False}],
        ],
        "outputs": [2, 3, 4],
    },
    "leaking_intermediate_small_region": {
        "dtype": "fp16",
        "config": "npu-small",
        "seed": 23539,
        "input": [3, 5],
        "nodes": [
            ["unary", [0], {"kind": "Relu"}],
            ["gemm", [0], {"n": 4, "bias": True, "transB": True, "act": None}],
            ["unary", [2], {"kind": "Relu"}],
            ["gemm", [1], {"n": 4, "bias": True, "transB": True, "act": None}],
            ["softmax", [2], {}],
        ],
        "outputs": [3, 4, 5],
    },
    # Two Expands to shapes given at run time around a ConstantOfShape: TVM's operator fusion (the
    # "zero" pipeline the build ran before the VM lowering) fused ops whose shapes come from tensor
    # values, and VMShapeLower failed ("PrimExpr 4 * (x_0 * x_1 * x_2 * x_3) has not been computed")
    # on a graph tvm.compile(target="llvm") builds. Found by the 2,000-graph campaign of the new families.
    "fused_value_shapes": {
        "dtype": "fp16",
        "config": "npu-ref",
        "seed": 8143,
        "input": [1, 16, 18, 3],
        "nodes": [
            [
                "conv",
                [0],
                {
                    "cout": 8,
                    "k": 1,
                    "stride": 3,
                    "dil": 1,
                    "pads": [0, 0, 0, 0],
                    "group": 1,
                    "bias": False,
                    "act": "Relu",
                },
            ],
            ["gap", [1], {}],
            ["expand_input", [1], {"name": "s0"}],
            ["constant_of_shape", [3], {}],
            ["expand_input", [4], {"name": "s1"}],
            [
                "conv",
                [5],
                {
                    "cout": 1,
                    "k": 5,
                    "stride": 3,
                    "dil": 1,
                    "pads": [1, 2, 2, 2],
                    "group": 1,
                    "bias": True,
                    "act": "Relu",
                },
            ],
        ],
        "outputs": [2, 6],
        "family": "shape",
        "inputs": [["s0", [4], [1, 8, 6, 1]], ["s1", [4], [1, 8, 6, 1]]],
    },
    # A region output read again inside the region stays resident, a copy stored to its DDR home
    # after the layer that writes it. A stack of rows (Concat on axis 0, here of a Gemm's output with
    # itself) is written by several layers and is no layer's output: the copy was never stored
    # (ERR_BAD_STREAM "DDR [241280, 242304) is never written", the region fell back to the CPU).
    "stacked_rows_region_output": {
        "dtype": "fp16",
        "config": "npu-small",
        "seed": 0,
        "input": [1, 600],
        "nodes": [
            ["binary", [0, 0], {"kind": "Add", "operand": "tensor", "const_first": False}],
            ["gemm", [0], {"n": 200, "bias": False, "transB": False, "act": None}],
            ["concat", [2, 2], {"axis": 0}],
        ],
        "outputs": [1, 3],
    },
    # The same stack, a region output read by two other layers of the region (one reads it twice).
    "stacked_rows_region_output_read_twice": {
        "dtype": "fp16",
        "config": "npu-small",
        "seed": 0,
        "input": [1, 600],
        "nodes": [
            ["gemm", [0], {"n": 200, "bias": False, "transB": False, "act": None}],
            ["concat", [1, 1], {"axis": 0}],
            ["gemm", [2], {"n": 16, "bias": False, "transB": False, "act": None}],
            ["binary", [2, 2], {"kind": "Mul", "operand": "tensor", "const_first": False}],
        ],
        "outputs": [2, 3, 4],
    },
    # A layer's output that is a region output and read by two layers and a stack of itself.
    "region_output_read_by_two_layers": {
        "dtype": "fp16",
        "config": "npu-small",
        "seed": 0,
        "input": [1, 600],
        "nodes": [
            ["gemm", [0], {"n": 200, "bias": False, "transB": False, "act": None}],
            ["binary", [1, 1], {"kind": "Add", "operand": "tensor", "const_first": False}],
            ["binary", [1, 2], {"kind": "Mul", "operand": "tensor", "const_first": False}],
            ["concat", [1, 1], {"axis": 0}],
        ],
        "outputs": [1, 3, 4],
    },
}


def _assert_ok(spec):
    outcome = graph_fuzz.check(spec)
    assert not outcome.bug, f"{outcome.kind}: {outcome.detail}\nspec = {spec!r}"
    return outcome


@settings(PROFILE, max_examples=40)
@given(graph_fuzz.graph_specs(dtype="fp16"))
def test_random_fp16_graphs_match_tvm_llvm(spec):
    _assert_ok(spec)


@settings(PROFILE, max_examples=30)
@given(graph_fuzz.graph_specs(dtype="int8"))
def test_random_int8_graphs_match_the_numpy_reference(spec):
    _assert_ok(spec)


@settings(PROFILE, max_examples=8)
@given(graph_fuzz.graph_specs(big=True))
def test_random_graphs_larger_than_sram_match(spec):
    """Feature maps or weights beyond npu-small's 512 KiB: row tiles, output-channel blocks, weight
    streaming."""
    _assert_ok(spec)


# The families of graph_fuzz_families.py and how many graphs of each CI runs (about 20 s of CPU).
FAMILY_EXAMPLES = {"shape": 6, "constants": 6, "dynamic": 5, "ops": 8}


@pytest.mark.parametrize("family", sorted(FAMILY_EXAMPLES))
def test_graph_families_match_tvm_llvm(family):
    """shape: Shape -> Slice -> Concat -> Reshape, Expand (also to a shape given at run time:
    match_cast), ConstantOfShape, Reshape allowzero. constants: a constant in every operand position.
    dynamic: a dim_param input (its ops on the CPU), a static part beside it on the NPU. ops: dilated
    MaxPool, BatchNormalization in training mode, Softmax of large logits, Clip with min > max,
    MatMulInteger / ConvInteger, LSTM with weights as graph inputs or peepholes."""

    @settings(PROFILE, max_examples=FAMILY_EXAMPLES[family])
    @given(graph_fuzz_families.family_specs(family=family))
    def run(spec):
        _assert_ok(spec)

    run()


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression(name):
    assert _assert_ok(REGRESSIONS[name]).kind == "pass"


def test_the_oracle_catches_a_wrong_answer(monkeypatch):
    """The comparison can fail: one wrong output row of 12 is far outside the fp16 bound."""
    spec = {
        "dtype": "fp16",
        "config": "npu-ref",
        "seed": 3,
        "input": [1, 8, 12, 12],
        "nodes": [
            [
                "conv",
                [0],
                {
                    "cout": 16,
                    "k": 3,
                    "stride": 1,
                    "dil": 1,
                    "pads": [1, 1, 1, 1],
                    "group": 1,
                    "bias": True,
                    "act": None,
                },
            ]
        ],
        "outputs": [1],
    }
    assert graph_fuzz.check(spec).kind == "pass"
    run = graph_fuzz._run

    def one_row_wrong(ex, x):
        outs = run(ex, x)
        if _npu(ex):  # the NPU build, not the llvm reference
            outs[0][0, :, 5, :] = 0.0
        return outs

    monkeypatch.setattr(graph_fuzz, "_run", one_row_wrong)
    outcome = graph_fuzz.check(spec)
    assert outcome.kind == "fail" and outcome.worst > 10, outcome  # 40 times the bound


def _npu(ex):
    import tvm_npu

    return tvm_npu.runtime.npu_modules(ex)


def test_a_fallback_that_hides_a_compiler_bug_is_a_bug(monkeypatch):
    """A region that falls back with NPU_E_INTERNAL gives the right answer, but the fuzzer still counts
    the compiler failure behind it (outcome "internal"), and an uncoded error before the fallback
    existed."""
    from tvm_npu.backend.lower import registry

    spec = {
        "dtype": "fp16",
        "config": "npu-ref",
        "seed": 4,
        "input": [6, 16],
        "nodes": [["gemm", [0], {"n": 8, "bias": True, "transB": True, "act": None}]],
        "outputs": [1],
    }

    def boom(comp):
        raise KeyError("injected")

    monkeypatch.setitem(registry._LOWERINGS, "dense", boom)
    outcome = graph_fuzz.check(spec)
    assert outcome.kind == "internal" and "KeyError" in outcome.detail and outcome.bug, outcome
