"""rewrite/fuse_gelu_erf.py: the erf GELU as torch.onnx writes it (Div sqrt 2, Erf, Add 1, Mul x, Mul 0.5)
becomes one relax.nn.gelu that runs on the NPU within 1e-2 of onnxruntime, only when it is exactly that
function; rewrite/divide_by_power_of_two.py: x / 2^k becomes x * 2^-k (x / 1 becomes x) with the same bits
as TVM's CPU build of the division, on every float32 class; other divisors stay."""

import numpy as np
import pytest
from onnx import helper
from test_fuse_activations import _model, _runs_on_npu_like_onnxruntime
from test_rewrite import count_ops

import tvm_npu
from tvm_npu import rewrite


def gelu_erf_model(form="div", half="last", consts=None):
    c = {"sqrt2": 1.4142135381698608, "inv": 0.7071067690849304, "one": 1.0, "half": 0.5, **(consts or {})}
    first = (helper.make_node("Div", ["x", "sqrt2"], ["s"]) if form == "div"
             else helper.make_node("Mul", ["inv", "x"], ["s"]))  # fmt: skip
    nodes = [first, helper.make_node("Erf", ["s"], ["e"]), helper.make_node("Add", ["one", "e"], ["t"])]
    if half == "last":  # (x * t) * 0.5, torch's order
        nodes += [helper.make_node("Mul", ["x", "t"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    else:  # (x * 0.5) * t
        nodes += [helper.make_node("Mul", ["half", "x"], ["h"]), helper.make_node("Mul", ["h", "t"], ["y"])]
    keep = {"sqrt2" if form == "div" else "inv", "one", "half"}
    return _model(nodes, {k: v for k, v in c.items() if k in keep})


@pytest.mark.parametrize("form, half", [("div", "last"), ("mul", "last"), ("div", "first")])
def test_written_out_erf_gelu_becomes_one_gelu_on_the_npu(form, half):
    model = gelu_erf_model(form, half)
    mod = rewrite.run(tvm_npu.from_onnx(model))
    assert count_ops(mod, "relax.nn.gelu") == 1 and count_ops(mod, "relax.erf") == 0, mod
    _runs_on_npu_like_onnxruntime(model, {"npu.gelu"})


@pytest.mark.parametrize("consts", [{"sqrt2": 1.41}, {"one": 2.0}, {"half": 0.25}])
def test_an_erf_chain_with_other_constants_is_left_alone(consts):
    mod = rewrite.run(tvm_npu.from_onnx(gelu_erf_model(consts=consts)))
    assert count_ops(mod, "relax.nn.gelu") == 0 and count_ops(mod, "relax.erf") == 1


def test_torchs_own_export_of_gelu_is_fused():
    torch = pytest.importorskip("torch", reason="needs torch to export (pip install '.[llm]')")
    import io

    import onnx

    buf = io.BytesIO()
    torch.onnx.export(torch.nn.GELU(), (torch.zeros(4, 40),), buf, opset_version=17, dynamo=False,
                      input_names=["x"], output_names=["y"])  # fmt: skip
    model = onnx.load_from_string(buf.getvalue())
    assert "Erf" in {n.op_type for n in model.graph.node}  # written out, as the UNet has it
    mod = rewrite.run(tvm_npu.from_onnx(model))
    assert count_ops(mod, "relax.nn.gelu") == 1 and count_ops(mod, "relax.erf") == 0
    _runs_on_npu_like_onnxruntime(model, {"npu.gelu"})


def _divide_model(divisor: float):
    return _model([helper.make_node("Div", ["x", "c"], ["y"])], {"c": divisor})


@pytest.mark.parametrize("divisor, becomes", [(1.0, None), (4.0, 0.25), (0.125, 8.0), (2.0**-100, 2.0**100)])
def test_a_power_of_two_divide_is_the_multiply_with_the_same_bits(divisor, becomes):
    """Against TVM's llvm build of the division itself, on normals, subnormals, zeros of both signs,
    infinities and NaN: identical bits."""
    import tvm
    from tvm import relax

    mod = tvm_npu.from_onnx(_divide_model(divisor))
    out = rewrite.run(mod)
    assert count_ops(out, "relax.divide") == 0
    assert count_ops(out, "relax.multiply") == (0 if becomes is None else 1)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 40)) * 10.0 ** rng.integers(-40, 38, (4, 40))).astype(np.float32)
    x.reshape(-1)[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 3.4e38]
    runs = []
    for m in (mod, out):
        ex = tvm.compile(m, target="llvm")
        runs.append(relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_array_equal(runs[0].view(np.uint32), runs[1].view(np.uint32))


@pytest.mark.parametrize("divisor", [3.0, 1.4142135, -2.0, 2.0**-127, 0.0])
def test_other_divisors_stay_divides(divisor):
    out = rewrite.run(tvm_npu.from_onnx(_divide_model(divisor)))
    assert count_ops(out, "relax.divide") == 1
