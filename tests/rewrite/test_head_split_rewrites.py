"""rewrite/compose_permutes.py and rewrite/scale_before_heads.py on attention blocks in the exporter's and
our decoder's forms (tests/head_attention.py): the op counts they promise, and outputs bit-identical to
TVM's llvm build of the module before the rewrite (a transpose and a scalar multiply commute exactly)."""

import numpy as np
import pytest
import tvm
from test_rewrite import count_ops
from tvm import relax

import tvm_npu
from head_attention import attention_model
from tvm_npu.rewrite import compose_permutes, scale_before_heads


def _llvm(mod, feeds):
    ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()


@pytest.mark.parametrize("decoder_form", [False, True])
def test_two_permutes_compose_into_one_with_the_same_bits(decoder_form):
    model, feeds = attention_model(1, 8, 2, 8, decoder_form=decoder_form, seed=3)
    mod = tvm_npu.from_onnx(model)
    after = compose_permutes(mod)
    # Q, K, V's splits and the merge: 4 permutes; the decoder form's K has a second one, composed away.
    assert count_ops(mod, "relax.permute_dims") == (5 if decoder_form else 4)
    assert count_ops(after, "relax.permute_dims") == 4
    np.testing.assert_array_equal(_llvm(after, feeds).view(np.uint32), _llvm(mod, feeds).view(np.uint32))


def test_a_chain_of_three_permutes_composes_to_one():
    x = relax.Var("x", relax.TensorType((2, 3, 4, 5), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.permute_dims(x, [0, 2, 1, 3]))
            y = bb.emit(relax.op.permute_dims(y, [0, 1, 3, 2]))
            y = bb.emit_output(relax.op.permute_dims(y, [3, 2, 1, 0]))
        bb.emit_func_output(y)
    mod = bb.get()
    after = compose_permutes(mod)
    assert count_ops(after, "relax.permute_dims") == 1
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)}
    np.testing.assert_array_equal(_llvm(after, feeds), _llvm(mod, feeds))


@pytest.mark.parametrize("ctx_seq", [None, 12])
def test_the_scale_moves_above_the_head_split_with_the_same_bits(ctx_seq):
    model, feeds = attention_model(2, 8, 4, 8, ctx_seq=ctx_seq, seed=5)
    mod = compose_permutes(tvm_npu.from_onnx(model))
    after = scale_before_heads(mod)
    g = after["main"].body.blocks[0].bindings
    values = {b.var: b.value for b in g}
    # Both scales now read a [B, S, C] tensor, and every matmul of two activations reads permutes directly.
    scales = [b.value for b in g if isinstance(b.value, relax.Call) and b.value.op.name == "relax.multiply"]
    assert len(scales) == 2 and all(len(s.args[0].ty.shape) == 3 for s in scales)
    qk = [b.value for b in g if isinstance(b.value, relax.Call) and b.value.op.name == "relax.matmul"
          and len(b.value.ty.shape) == 4]  # fmt: skip
    assert all(values[a].op.name == "relax.permute_dims" for a in qk[0].args)
    np.testing.assert_array_equal(_llvm(after, feeds).view(np.uint32), _llvm(mod, feeds).view(np.uint32))


def test_a_scale_whose_split_has_another_reader_stays():
    """The unscaled split is read elsewhere too: moving the multiply would compute the split twice."""
    x = relax.Var("x", relax.TensorType((1, 4, 16), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            r = bb.emit(relax.op.reshape(x, (1, 4, 2, 8)))
            p = bb.emit(relax.op.permute_dims(r, [0, 2, 1, 3]))
            s = bb.emit(relax.op.multiply(p, relax.const(0.5, "float32")))
            y = bb.emit_output(relax.op.add(s, p))
        bb.emit_func_output(y)
    mod = bb.get()
    assert scale_before_heads(mod) is mod
