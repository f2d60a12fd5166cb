"""The past/present pairs of a decoder export become the step model's static cache.

In the export, layer i's attention reads `present = Concat(past_key_values.i.key, new, axis=2)` and
returns `present` as `present.i.key`. In the step model the past is the whole cache [1, H_kv, T, D]
and the Concat becomes a write of the S new rows at `position` (ScatterND, which TVM's importer
reads): the attention then runs over all T rows (the rebuilt mask hides rows > position + s), and the
written cache is the output `cache_out.i.key`. With the past length fixed at T - S while folding,
every shape after the Concat is already [.., T, ..]: nothing downstream changes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..contract.errors import NPUError
from .decoder_forms import APPENDS, Append
from .decoder_forms.common import Context


def _missing(what: str) -> NPUError:
    return NPUError(
        "ERR_OP_NOT_SUPPORTED",
        f"no {what}; the importer maps a decoder-with-past export whose layers append each past key/value "
        "and the new one along the sequence axis (the forms of frontend/decoder_forms) and return the result "
        "as a graph output",
    )


def _indices(graph: onnx.GraphProto, heads: int, seq: int) -> list[onnx.NodeProto]:
    """Nodes computing the ScatterND indices [1, H, S, 3] of rows (0, h, position + s) as
    Concat(0, h, Expand(position + s)) on the last axis: the form of `tvm_npu.models.decoder`'s step
    models, which the resident cache recognises (partition/kv_cache_check.py)."""
    shape = (1, heads, seq, 1)
    head = np.broadcast_to(np.arange(heads, dtype=np.int64)[None, :, None, None], shape)
    graph.initializer.extend(
        numpy_helper.from_array(np.ascontiguousarray(v), name)
        for name, v in [
            ("cache/steps", np.arange(seq, dtype=np.int64)),
            ("cache/zero", np.zeros(shape, np.int64)),
            ("cache/head", head),
            ("cache/column", np.array([1, 1, seq, 1], np.int64)),
            ("cache/shape", np.array(shape, np.int64)),
        ]
    )
    return [
        helper.make_node("Add", ["position", "cache/steps"], ["cache/positions"]),  # [S]: position + s
        helper.make_node("Reshape", ["cache/positions", "cache/column"], ["cache/rows1"]),
        helper.make_node("Expand", ["cache/rows1", "cache/shape"], ["cache/rows"]),
        helper.make_node("Concat", ["cache/zero", "cache/head", "cache/rows"], ["cache/indices"], axis=3),
    ]


def _append(graph: onnx.GraphProto, past: str, ctx: Context) -> Append:
    """The cache append of `past`, by the first form of decoder_forms.APPENDS that matches its data flow;
    checked to be the past's only reader."""
    found = next((a for a in (form.find(graph, past, ctx) for form in APPENDS) if a is not None), None)
    if found is None:
        readers = ", ".join(f"{n.op_type} {n.name!r}" for n in ctx.readers.get(past, [])) or "nothing"
        raise _missing(f"Concat of {past} along axis 2 returned as a graph output (it is read by {readers})")
    mine = {id(found.node), *(id(n) for n in found.dropped)}
    others = [n for n in ctx.readers.get(past, []) if id(n) not in mine]
    if others:
        raise _missing(f"{past} read only by its cache append (also read by {others[0].op_type} {others[0].name!r})")
    return found


def write_caches(model: onnx.ModelProto, layers: int, heads: int, seq: int, ctx: Context) -> None:
    """Each cache append of past_key_values.{i}.{kv} (decoder_forms.APPENDS) -> ScatterND(cache.{i}.{kv},
    rows at position, new), its output (and the present it returns) renamed cache_out.{i}.{kv}."""
    graph = model.graph
    write = _indices(graph, heads, seq)
    rename, dropped = {}, set()
    for i in range(layers):
        for kv in ("key", "value"):
            found = _append(graph, f"past_key_values.{i}.{kv}", ctx)
            concat = found.node
            for node in found.dropped:
                dropped.add(id(node))
            rename[found.present] = f"cache_out.{i}.{kv}"
            if found.write is not None:  # the append inside another op: the form rewrites that op
                write += found.write(concat, f"cache.{i}.{kv}", "cache/indices")
                continue
            concat.op_type = "ScatterND"
            del concat.attribute[:]
            del concat.input[:]
            concat.input.extend([f"cache.{i}.{kv}", "cache/indices", found.new])
            rename[concat.output[0]] = rename[found.present]  # what the attention reads: the cache
            concat.output[0] = found.present
    kept = [n for n in graph.node if id(n) not in dropped]
    for node in kept:
        for k, name in enumerate(node.input):
            node.input[k] = rename.get(name, name)
        for k, name in enumerate(node.output):
            node.output[k] = rename.get(name, name)
    del graph.node[:]
    graph.node.extend(write + kept)


def position_ids(model: onnx.ModelProto, seq: int) -> None:
    """The input position_ids [1, S] becomes position + arange(S), computed in the graph."""
    model.graph.initializer.append(
        numpy_helper.from_array(np.arange(seq, dtype=np.int64).reshape(1, seq), "position_ids/offsets")
    )
    node = helper.make_node("Add", ["position", "position_ids/offsets"], ["position_ids"])
    nodes = [node, *model.graph.node]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
