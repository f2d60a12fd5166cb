"""The minor a stream says (contract.stream.written_minor): 1.3 unless a command uses something of 1.4,
so a stream without 1.4 features keeps 1.3's bytes and runs on a deployed 1.3 runtime."""

import pytest

from tvm_npu.contract import stream

SOFTMAX = dict(dtype=stream.DTYPES["float16"], rows=2, row_elems=16)


def unary(func):
    return stream.Command("UNARY", dict(dtype=stream.DTYPES["float16"], func=stream.UNARY_FUNCS[func]))


@pytest.mark.parametrize(
    "func, minor",
    [("sigmoid", 3), ("tanh", 3), ("hardswish", 3), ("gelu", 3), ("leaky_relu", 3), ("silu", 4), ("gelu_tanh", 4)],
)
def test_unary_func_of_format_1_4_makes_the_stream_1_4(func, minor):
    assert stream.written_minor([unary(func), stream.Command("END")]) == minor
    assert stream.written_minor([unary("sigmoid"), unary(func), unary("tanh"), stream.Command("END")]) == minor


@pytest.mark.parametrize(
    "extra, minor",
    [
        ({}, 3),
        (dict(scale=0, mask_addr=0, mask_stride=0, mask_rows=0, mask_row0=0), 3),  # 0 keeps 1.1's softmax
        (dict(scale=stream.f32_bits(0.125)), 4),
        (dict(mask_addr=4096, mask_stride=128, mask_rows=8), 4),
    ],
)
def test_scaled_or_masked_softmax_makes_the_stream_1_4(extra, minor):
    assert stream.written_minor([stream.Command("SOFTMAX", dict(SOFTMAX, **extra)), stream.Command("END")]) == minor


def test_a_stream_of_nothing_new_says_1_3():
    assert stream.written_minor([stream.Command("END")]) == 3
