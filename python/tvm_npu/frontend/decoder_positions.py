"""The positions of a decoder export without a `position_ids` input, computed from the step model's `position`.

Some exporters compute the positions inside the graph: optimum's Gemma export takes
`arange(past, past + S)` of the past's length (transformers' `cache_position`), others
`cumsum(attention_mask) - 1`. With the past length fixed at T - S for folding, those positions would
fold to the constant T - S + s, right only when the cache is full: the step model needs
`position + s` for a run-time `position`.

The positions are found, not assumed, as decoder_mask.py finds the mask: the graph is specialized and
folded for a few (S, past) trials with an all-ones attention_mask (the step model's: its cache rows
below `position` are all real tokens), and a tensor is the positions when, in every trial, it holds
past + arange(S) along one axis of length S (its other axes 1), and no mask-shaped [..., S, T] value
is computed from it (the mask's query rows are left to decoder_mask.py, which rebuilds the mask from
`position`; the cone it checks holds constants there). The *roots* among them (not computed from another)
are replaced by `position + arange(S)` of their shape and type, so everything computed
from them (rotary tables, learned position embeddings) follows `position`. No such tensor is a coded
error.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..contract.errors import NPUError
from . import decoder_fold

# (S, past) of the trials: S >= 2 so that a scalar past length cannot pass for the positions, and
# different pasts so that a constant cannot
_TRIALS = ((2, 3), (3, 6), (4, 9))


def _trial(model: onnx.ModelProto, specialize: Callable, seq: int, past: int) -> dict[str, np.ndarray]:
    """Every tensor's value that folding proves for S = seq after `past` rows, the attention_mask all
    ones: the model without its weights' data (positions never read them), specialized and folded with
    every tensor a graph output so that folding keeps each value (as an initializer) instead of
    dropping it once read."""
    light = decoder_fold.light_copy(model)
    specialize(light, seq, past + seq)
    mask = next(i for i in light.graph.input if i.name == "attention_mask")
    dtype = helper.tensor_dtype_to_np_dtype(mask.type.tensor_type.elem_type)
    light.graph.input.remove(mask)
    light.graph.initializer.append(numpy_helper.from_array(np.ones((1, past + seq), dtype), "attention_mask"))
    produced = [o for n in light.graph.node for o in n.output if o]
    light.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in produced)
    decoder_fold.fold(light)
    return decoder_fold.constants(light.graph)


def _axis(value: np.ndarray, seq: int, past: int) -> int | None:
    """The axis along which `value` holds past + arange(seq) (its other axes of length 1), else None."""
    if value.size != seq or value.dtype == np.bool_ or not np.issubdtype(value.dtype, np.number):
        return None
    if not np.array_equal(value.reshape(-1), past + np.arange(seq)):
        return None
    return value.shape.index(seq)


def _feeds_a_mask(readers: dict, name: str, values: dict, seq: int, total: int) -> bool:
    """Whether a value computed from `name` (Shape / Size read only its shape) and folded in the trial is
    mask-shaped [..., S, T]: the query rows of the causal mask, which decoder_mask.py rebuilds."""
    seen, stack = set(), [name]
    while stack:
        t = stack.pop()
        for node in readers.get(t, []):
            if node.op_type in ("Shape", "Size"):
                continue
            for out in node.output:
                value = values.get(out)
                if out in seen or value is None:  # not folded: an activation, past the positions' cone
                    continue
                if value.ndim >= 2 and value.shape[-2:] == (seq, total):
                    return True
                seen.add(out)
                stack.append(out)
    return False


def _found(model: onnx.ModelProto, specialize: Callable) -> dict[str, tuple[int, int, np.dtype]]:
    """The tensors holding the positions in every trial and feeding no mask: name -> (rank, axis, dtype)."""
    readers = {}
    for node in model.graph.node:
        for i in node.input:
            readers.setdefault(i, []).append(node)
    found, masks = None, set()
    for seq, past in _TRIALS:
        values = _trial(model, specialize, seq, past)
        here = {}
        for name, value in values.items():
            axis = _axis(value, seq, past)
            if axis is not None:
                here[name] = (value.ndim, axis, value.dtype)
        masks |= {k for k in here if _feeds_a_mask(readers, k, values, seq, past + seq)}
        found = here if found is None else {k: v for k, v in found.items() if here.get(k) == v}
    return {k: v for k, v in (found or {}).items() if k not in masks}


def _roots(graph: onnx.GraphProto, names: set[str]) -> list[str]:
    """The names of `names` that are not computed, through any path, from another of them."""
    producer = {o: n for n in graph.node for o in n.output}
    roots = []
    for name in sorted(names):
        seen, stack, derived = set(), list(producer[name].input), False
        while stack and not derived:
            t = stack.pop()
            if t in seen or t not in producer:
                continue
            seen.add(t)
            derived = t in names
            stack.extend(producer[t].input)
        if not derived:
            roots.append(name)
    return roots


def _from_position(name: str, rank: int, axis: int, dtype: np.dtype, seq: int) -> tuple[list, list]:
    """Nodes computing `name` = position + arange(seq) along `axis` of a rank-`rank` tensor of `dtype`
    (`position` [1] broadcasts against the steps' shape)."""
    p = f"{name}/from_position_"
    shape = [1] * rank
    shape[axis] = seq
    steps = numpy_helper.from_array(np.arange(seq, dtype=np.int64).reshape(shape), p + "steps")
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    if to == TensorProto.INT64:
        return [helper.make_node("Add", ["position", p + "steps"], [name])], [steps]
    add = helper.make_node("Add", ["position", p + "steps"], [p + "int64"])
    return [add, helper.make_node("Cast", [p + "int64"], [name], to=to)], [steps]


def _refused() -> NPUError:
    return NPUError(
        "ERR_OP_NOT_SUPPORTED",
        "no graph input position_ids, and no tensor in the graph computes the positions past + arange(S) "
        "from the past length or attention_mask (tried S, past = "
        + ", ".join(f"{s}, {p}" for s, p in _TRIALS)
        + "); export the decoder with a position_ids input (the standard decoder-with-past interface)",
    )


def rewrite(model: onnx.ModelProto, seq: int, specialize: Callable) -> bool:
    """Without a position_ids input, replace the graph's positions (found as described above) by
    `position + arange(seq)`, adding the graph input `position` [1] int64; the model is not yet
    specialized (`specialize(model, S, T)` does that, for the trials). Returns False, changing
    nothing, when the graph has a position_ids input.

    Raises NPUError ERR_OP_NOT_SUPPORTED when no tensor holds the positions."""
    graph = model.graph
    if any(i.name == "position_ids" for i in graph.input):
        return False
    found = _found(model, specialize)
    produced = {o for n in graph.node for o in n.output}
    names = {k for k in found if k in produced}
    if not names:
        raise _refused()
    roots = set(_roots(graph, names))
    new_nodes, new_inits = [], []
    for name in sorted(roots):
        nodes, inits = _from_position(name, *found[name], seq)
        new_nodes += nodes
        new_inits += inits
    for node in graph.node:  # the roots' producers lose those outputs; remove_dead drops what nothing reads
        node.output[:] = [f"{o}/replaced" if o in roots else o for o in node.output]
    kept = list(graph.node)
    del graph.node[:]
    graph.node.extend(new_nodes + kept)
    graph.initializer.extend(new_inits)
    graph.input.append(helper.make_tensor_value_info("position", TensorProto.INT64, [1]))
    return True
