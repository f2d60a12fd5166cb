"""Graphs the importer cannot map, and bad arguments: coded errors that name what is missing."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_npu import NPUError
from tvm_npu.frontend import to_step_model


def _code(fn):
    with pytest.raises(NPUError) as err:
        fn()
    return err.value.code, str(err.value)


def test_past_not_concatenated(hf_export):
    """Layer 1's key passes through a Mul before its Concat: the cache pattern is missing."""
    model = onnx.load(hf_export("llama"))
    concat = next(n for n in model.graph.node if n.op_type == "Concat" and "past_key_values.1.key" in n.input)
    concat.input[0] = "scaled_past"
    model.graph.initializer.append(numpy_helper.from_array(np.array(1.0, np.float32), "one"))
    model.graph.node.insert(0, helper.make_node("Mul", ["past_key_values.1.key", "one"], ["scaled_past"]))
    code, msg = _code(lambda: to_step_model(model, 16, 1))
    assert code == "ERR_OP_NOT_SUPPORTED"
    assert "no Concat of past_key_values.1.key along axis 2" in msg


def test_mask_not_causal(hf_export):
    """The causal mask shifted by one (LessOrEqual -> Less hides the diagonal): not rebuilt, refused."""
    model = onnx.load(hf_export("gpt2"))
    (node,) = [n for n in model.graph.node if n.op_type == "LessOrEqual"]
    node.op_type = "Less"
    code, msg = _code(lambda: to_step_model(model, 16, 4))
    assert code == "ERR_OP_NOT_SUPPORTED" and "no causal attention mask built from attention_mask" in msg


def test_no_position_ids(hf_export):
    """Positions computed inside the graph would be folded to constants: refused, not guessed."""
    model = onnx.load(hf_export("gpt2"))
    for node in model.graph.node:
        node.input[:] = ["pos" if i == "position_ids" else i for i in node.input]
    next(i for i in model.graph.input if i.name == "position_ids").name = "pos"
    code, msg = _code(lambda: to_step_model(model, 16, 1))
    assert code == "ERR_OP_NOT_SUPPORTED" and "no graph input position_ids" in msg


def _not_a_decoder():
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, "s"])
           for n in ("input_ids", "attention_mask", "position_ids")]  # fmt: skip
    out = helper.make_tensor_value_info("logits", TensorProto.INT64, [1, "s"])
    graph = helper.make_graph([helper.make_node("Add", ["input_ids", "position_ids"], ["logits"])], "g", ins, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_no_past():
    code, msg = _code(lambda: to_step_model(_not_a_decoder(), 16, 1))
    assert code == "ERR_OP_NOT_SUPPORTED" and "no past_key_values.0.key" in msg


@pytest.mark.parametrize("seq_len, max_context", [(0, 16), (17, 16), (2.0, 16)])
def test_bad_lengths(seq_len, max_context):
    code, _ = _code(lambda: to_step_model(_not_a_decoder(), max_context, seq_len))
    assert code == "ERR_INVALID_CONFIG"


def test_unreadable_file(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"not onnx")
    code, _ = _code(lambda: to_step_model(str(path), 16, 1))
    assert code == "ERR_INVALID_MODEL"
