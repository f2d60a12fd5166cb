"""ONNX's own RotaryEmbedding op (opset 23, frontend/contrib/onnx_rotary_embedding.py), which
torch.onnx.export(dynamo=True, opset_version=23) writes for Llama's RoPE: single nodes written with
onnx.helper, imported by tvm_npu.from_onnx and run by TVM's llvm build, against onnxruntime 1.32 on the
same model (1e-5). (The dynamo Llama decoder that holds it: test_onnx_attention.py.)"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tvm_npu
from conftest import run_cpu
from tvm_npu.contract.errors import NPUError

B, H, S, DH, POSITIONS = 2, 3, 5, 8, 16


def _case(rank: int, positions: bool, interleaved: int, rot: int, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, H, S, DH) if rank == 4 else (B, S, H * DH)).astype(np.float32)
    half = (rot or DH) // 2
    angles = rng.uniform(-3, 3, (POSITIONS, half) if positions else (B, S, half)).astype(np.float32)
    feeds = {"X": x, "cos": np.cos(angles), "sin": np.sin(angles)}
    if positions:
        feeds["pos"] = rng.integers(0, POSITIONS, (B, S)).astype(np.int64)
    attrs = dict(interleaved=interleaved, rotary_embedding_dim=rot)
    if rank == 3:
        attrs["num_heads"] = H
    node = helper.make_node("RotaryEmbedding", list(feeds), ["Y"], name="rope", **attrs)
    typed = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()
    ]
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(x.shape))
    model = helper.make_model(
        helper.make_graph([node], "rope", typed, [out]), opset_imports=[helper.make_opsetid("", 23)]
    )
    model.ir_version = 10
    return model, feeds


@pytest.mark.parametrize("rot", [0, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", [True, False])
@pytest.mark.parametrize("rank", [4, 3])
def test_rotary_embedding_matches_onnxruntime(rank, positions, interleaved, rot):
    """4-D / 3-D, tables gathered by position_ids or given per token, halves / interleaved pairs, the whole
    head or its first 4 features."""
    model, feeds = _case(rank, positions, interleaved, rot)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run_cpu(tvm_npu.from_onnx(model), *feeds.values())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(got - feeds["X"]).max() > 0.1  # it rotated


def test_an_odd_rotary_dim_is_a_coded_error():
    model, _ = _case(4, True, 0, 0)
    model.graph.node[0].attribute.append(helper.make_attribute("rotary_embedding_dim", 3))
    del model.graph.node[0].attribute[1]  # the first rotary_embedding_dim (0)
    with pytest.raises(NPUError) as err:
        tvm_npu.from_onnx(model)
    assert err.value.code == "ERR_INVALID_MODEL" and "rotary_embedding_dim" in str(err.value), err.value
