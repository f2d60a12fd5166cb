"""ir/split_invariant.py on small hand-written Relax functions (no torch needed): what moves to `prompt`
and what stays, the two functions against the unsplit one on TVM's llvm build (bit for bit), and the
coded errors."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_npu.build import cpu_pipeline
from tvm_npu.contract.errors import NPUError
from tvm_npu.ir.split_invariant import split_invariant

RNG = np.random.default_rng(0)
W = RNG.standard_normal((6, 6)).astype(np.float32)
B = RNG.standard_normal((6,)).astype(np.float32)


def _module():
    """main(x [2, 6], y [2, 6]): k = (y @ W^T) * 0.5 (compute on y alone), r = reshape(y) (a view),
    c = W^T (constants alone); out = x @ c + k + reshape(r) + b."""
    x, y = relax.Var("x", relax.TensorType((2, 6), "float32")), relax.Var("y", relax.TensorType((2, 6), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y], attrs={"num_input": 2}):
        with bb.dataflow():
            c = bb.emit(relax.op.permute_dims(relax.const(W)), name_hint="c")
            k0 = bb.emit(relax.op.matmul(y, c), name_hint="k0")
            k = bb.emit(relax.op.multiply(k0, relax.const(np.float32(0.5))), name_hint="k")
            r = bb.emit(relax.op.reshape(y, (3, 4)), name_hint="r")
            h = bb.emit(relax.op.matmul(x, c), name_hint="h")
            s = bb.emit(relax.op.add(h, k), name_hint="s")
            s2 = bb.emit(relax.op.add(s, relax.op.reshape(r, (2, 6))), name_hint="s2")
            out = bb.emit_output(relax.op.add(s2, relax.const(B)))
        bb.emit_func_output(out)
    return bb.get()


def _ops(func) -> list:
    names = []
    relax.analysis.post_order_visit(
        func, lambda e: names.append(e.op.name) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) else None
    )
    return names


def _run(mod, name, *args):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm", relax_pipeline=cpu_pipeline()), tvm.cpu())
    return vm[name](*[tvm.runtime.tensor(a) if isinstance(a, np.ndarray) else a for a in args])


def test_compute_on_the_invariant_input_moves_its_view_stays():
    mod = _module()
    split, hoisted = split_invariant(mod, ["y"])
    assert hoisted == ["prompt_k"]  # the frontier: k, not k0 (main reads only k)
    assert [p.name for p in split["prompt"].params] == ["y"]
    # main still takes y: its only use there is a reshape chain, not worth a tensor of the interface
    assert [p.name for p in split["main"].params] == ["x", "y", "prompt_k"]
    assert _ops(split["prompt"]) == ["relax.permute_dims", "relax.matmul", "relax.multiply"]
    # c (constants alone) is read by both: computed in each, never hoisted
    assert sorted(_ops(split["main"])) == sorted(
        ["relax.permute_dims", "relax.reshape", "relax.matmul", "relax.add", "relax.add", "relax.reshape", "relax.add"]
    )
    assert int(split["main"].attrs["num_input"]) == 3


def test_the_two_functions_are_mains_result_bit_for_bit():
    mod = _module()
    split, _ = split_invariant(mod, ["y"])
    x, y = RNG.standard_normal((2, 6)).astype(np.float32), RNG.standard_normal((2, 6)).astype(np.float32)
    want = _run(mod, "main", x, y).numpy()
    np.testing.assert_allclose(want, x @ W.T + (y @ W.T) * 0.5 + y + B, rtol=1e-5, atol=1e-5)  # numpy: sanity
    vm = relax.VirtualMachine(tvm.compile(split, target="llvm", relax_pipeline=cpu_pipeline()), tvm.cpu())
    kept = vm["prompt"](tvm.runtime.tensor(y))
    got = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y), *kept).numpy()
    assert np.array_equal(got, want)


def test_nothing_worth_hoisting_leaves_main_whole():
    split, hoisted = split_invariant(_views_only(), ["y"])
    assert hoisted == [] and [p.name for p in split["main"].params] == ["x", "y"]
    assert len(split["prompt"].ret_ty.fields) == 0


def _views_only():
    x, y = relax.Var("x", relax.TensorType((2, 6), "float32")), relax.Var("y", relax.TensorType((2, 6), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            r = bb.emit(relax.op.reshape(y, (2, 6)))
            out = bb.emit_output(relax.op.add(x, r))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("names, says", [(["z"], "['z'] are not inputs of main"), ([], "are not inputs")])
def test_an_unknown_invariant_input_is_coded(names, says):
    with pytest.raises(NPUError, match="ERR_INVALID_CONFIG") as err:
        split_invariant(_module(), names)
    assert says in str(err.value) and "['x', 'y']" in str(err.value)


def test_a_prompt_function_already_there_is_coded():
    split, _ = split_invariant(_module(), ["y"])
    with pytest.raises(NPUError, match="ERR_INVALID_CONFIG"):
        split_invariant(split, ["y"])


def test_a_main_outside_dataflow_is_refused_not_guessed():
    x, y = relax.Var("x", relax.TensorType((2, 6), "float32")), relax.Var("y", relax.TensorType((2, 6), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y]):
        out = bb.emit(relax.op.add(x, relax.op.matmul(y, relax.const(W))))  # a binding block, no dataflow
        bb.emit_func_output(out)
    with pytest.raises(NPUError, match="ERR_OP_NOT_SUPPORTED") as err:
        split_invariant(bb.get(), ["y"])
    assert "outside dataflow" in str(err.value)


def test_a_head_split_at_the_end_of_the_chain_stays_in_main():
    """k = reshape(permute(y @ W^T)) as attention's head split: the dense result crosses, not its heads."""
    x = relax.Var("x", relax.TensorType((3, 2, 2), "float32"))
    y = relax.Var("y", relax.TensorType((2, 6), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y], attrs={"num_input": 2}):
        with bb.dataflow():
            k0 = bb.emit(relax.op.matmul(y, relax.const(W.T.copy())), name_hint="k0")
            k1 = bb.emit(relax.op.reshape(k0, (2, 3, 2)), name_hint="k1")
            k = bb.emit(relax.op.permute_dims(k1, [1, 0, 2]), name_hint="k")
            out = bb.emit_output(relax.op.add(x, k))
        bb.emit_func_output(out)
    mod = bb.get()
    split, hoisted = split_invariant(mod, ["y"])
    assert hoisted == ["prompt_k0"] and _ops(split["prompt"]) == ["relax.matmul"]
    assert sorted(_ops(split["main"])) == ["relax.add", "relax.permute_dims", "relax.reshape"]
    xv, yv = RNG.standard_normal((3, 2, 2)).astype(np.float32), RNG.standard_normal((2, 6)).astype(np.float32)
    want = xv + (yv @ W.T).reshape(2, 3, 2).transpose(1, 0, 2)  # numpy
    vm = relax.VirtualMachine(tvm.compile(split, target="llvm", relax_pipeline=cpu_pipeline()), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(xv), *vm["prompt"](tvm.runtime.tensor(yv))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.array_equal(got, _run(mod, "main", xv, yv).numpy())  # bit for bit against the unsplit
