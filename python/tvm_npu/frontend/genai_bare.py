"""An onnxruntime-genai decoder without its folder: the genai_config.json its graph implies (genai.py).

Users often hold the builder's `model.onnx` alone (copied out of the folder, downloaded without the config,
or loaded into a ModelProto). Everything genai.to_step_model reads from the config but the names can be
read from the graph: the head size from the width of the first GroupQueryAttention's query (its
`num_heads`, `kv_num_heads`, packed QKV when its key input is empty) or the past input's static last
dimension, and the context length from the rows of its rotary cos_cache, where the model's positions end.
The I/O names are the builder's defaults; a file that renamed them is not recognized and says so. A
decoder without rotary tables has no context length: `max_context=` must be given.

Only the initializers' shapes are read, not their data, so a file with external data is recognized
without loading its weights.
"""

from __future__ import annotations

import json
import os

import onnx

from ..contract.errors import NPUError

GQA = "GroupQueryAttention"


def has_gqa(model: onnx.ModelProto) -> bool:
    """True when `model`'s graph holds a GroupQueryAttention node (onnxruntime's contrib op)."""
    return any(n.op_type == GQA for n in model.graph.node)


def _shapes(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Each initializer's and Constant node's shape, by name (no tensor data read)."""
    out = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.output) == 1:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                out[node.output[0]] = list(value.dims)
    return out


def _width(graph: onnx.GraphProto, shapes: dict, name: str) -> int:
    """The static last dimension of tensor `name`, read from the op that makes it (0 when unknown)."""
    producer = {o: n for n in graph.node for o in n.output}
    for _ in range(8):  # through a bias Add or a Cast to the projection
        node = producer.get(name)
        if node is None:
            return 0
        if node.op_type == "MatMulNBits":
            return next((a.i for a in node.attribute if a.name == "N"), 0)
        if node.op_type == "MatMul":
            return shapes.get(node.input[1], [0])[-1]
        if node.op_type == "Add":
            const = [i for i in node.input if i in shapes]
            if const and shapes[const[0]]:
                return shapes[const[0]][-1]
            name = node.input[0]
        elif node.op_type in ("Cast", "Identity"):
            name = node.input[0]
        else:
            return 0
    return 0


def _refuse(what: str) -> NPUError:
    return NPUError(
        "ERR_OP_NOT_SUPPORTED",
        f"an onnxruntime-genai decoder without its genai_config.json: {what}; put the file in its folder "
        "beside genai_config.json (or pass the folder)",
    )


def config(model: onnx.ModelProto, filename: str = "model.onnx") -> dict:
    """The genai_config.json `model` (a decoder with GroupQueryAttention) implies: head_size and,
    with rotary tables, context_length. Raises ERR_OP_NOT_SUPPORTED when the head size cannot be read."""
    graph = model.graph
    gqa = next(n for n in graph.node if n.op_type == GQA)
    attrs = {a.name: a.i for a in gqa.attribute if a.type == onnx.AttributeProto.INT}
    heads, kv_heads = attrs.get("num_heads", 0), attrs.get("kv_num_heads", 0)
    if not heads or not kv_heads:
        raise _refuse(f"{gqa.name} has no num_heads / kv_num_heads")
    shapes = _shapes(graph)
    past = {i.name: i for i in graph.input}.get(gqa.input[3]) if len(gqa.input) > 3 else None
    dims = past.type.tensor_type.shape.dim if past is not None else []
    D = dims[3].dim_value if len(dims) == 4 else 0
    if not D:
        width = _width(graph, shapes, gqa.input[0])
        packed = len(gqa.input) < 2 or not gqa.input[1]
        per = heads + 2 * kv_heads if packed else heads
        if not width or width % per:
            raise _refuse(f"the head size of {gqa.name} (its query's width {width or 'unknown'})")
        D = width // per
    decoder = {"filename": filename, "head_size": int(D), "num_attention_heads": heads, "num_key_value_heads": kv_heads}
    out = {"model": {"decoder": decoder}}
    do_rotary = attrs.get("do_rotary", 0)
    cos = shapes.get(gqa.input[7]) if do_rotary and len(gqa.input) > 7 else None
    if cos:
        out["model"]["context_length"] = int(cos[0])
    return out


def beside(path) -> str | None:
    """The folder of the file `path` when it holds a genai_config.json naming that file, else None."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        with open(os.path.join(folder, "genai_config.json")) as f:
            name = json.load(f)["model"]["decoder"].get("filename", "model.onnx")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return folder if os.path.basename(path) == name else None
