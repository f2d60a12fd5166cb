"""rewrite/repeated_constants.py: a constant operand whose images are equal is cut to one image; TVM's llvm
build of the module before and after is bit-identical; constants whose images differ, or whose cut
would change the output's shape, are left alone."""

import numpy as np
import pytest
import tvm
from tvm import relax

from conftest import run_cpu
from tvm_npu.rewrite import repeated_constants

RNG = np.random.default_rng(3)
X = RNG.standard_normal((2, 4, 8, 8)).astype(np.float32)


def _module(op, const: np.ndarray, x_shape=(2, 4, 8, 8), const_first=False) -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(x_shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            c = relax.const(const)
            y = bb.emit_output(op(c, x) if const_first else op(x, c))
        bb.emit_func_output(y)
    return bb.get()


def _constant_shapes(mod) -> list:
    return [
        tuple(a.value.numpy().shape)
        for b in mod["main"].body.blocks[0].bindings
        for a in b.value.args
        if isinstance(a, tvm.ir.Constant)
    ]


MASK = np.triu(np.full((8, 8), -1e9, np.float32), 1)


@pytest.mark.parametrize("op", [relax.op.add, relax.op.subtract, relax.op.multiply, relax.op.maximum])
@pytest.mark.parametrize("const_first", [False, True])
def test_a_mask_repeated_over_the_batch_is_one_mask_bit_identical(op, const_first):
    const = np.broadcast_to(MASK, (2, 1, 8, 8)).copy()
    before = _module(op, const, const_first=const_first)
    after = repeated_constants(before)
    assert _constant_shapes(before) == [(2, 1, 8, 8)] and _constant_shapes(after) == [(1, 1, 8, 8)]
    assert np.array_equal(run_cpu(after, X), run_cpu(before, X))


def test_only_the_batch_is_cut_and_signed_zeros_count_as_different():
    row = RNG.standard_normal(8).astype(np.float32)
    const = np.broadcast_to(row, (2, 4, 8, 8)).copy()  # repeats over batch, channel and rows
    after = repeated_constants(_module(relax.op.add, const))
    assert _constant_shapes(after) == [(1, 4, 8, 8)]
    gamma = np.ones((1, 4, 1, 1), np.float32)  # a fresh norm's ones: the per-channel vector stays
    mod = _module(relax.op.multiply, gamma)
    assert repeated_constants(mod) is mod
    zeros = np.zeros((2, 1, 8, 8), np.float32)
    zeros[1] = -0.0  # -0.0 == 0.0 numerically, but x + -0.0 keeps a -0.0 of x: not the same constant
    mod = _module(relax.op.add, zeros)
    assert repeated_constants(mod) is mod


def test_slices_that_differ_or_an_operand_that_broadcasts_are_left_alone():
    mod = _module(relax.op.add, RNG.standard_normal((2, 1, 8, 8)).astype(np.float32))
    assert repeated_constants(mod) is mod
    # x [1, 4, 8, 8] + c [2, 1, 8, 8] -> [2, 4, 8, 8]: c's batch makes the output's; cut, it would be [1, ...]
    mod = _module(relax.op.add, np.broadcast_to(MASK, (2, 1, 8, 8)).copy(), x_shape=(1, 4, 8, 8))
    assert repeated_constants(mod) is mod
