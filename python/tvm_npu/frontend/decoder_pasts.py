"""A decoder's KV-cache inputs ("pasts") and outputs ("presents") found by data flow, not by name.

The importer (decoder.py, llm/steps.py) reads a decoder-with-past by the standard names
`past_key_values.{i}.key/value` -> `present.{i}.key/value`. Exporters and hand-written graphs call them
otherwise (`past_k_3`, `cache.layer0.k`, `in_cache_0`, in any input order), so when no input has a
standard name this finder gives them one, from the structure only:

- a past is a graph input of rank 4 and a float type with static dims 1 and 3 (KV heads, head dim; batch
  and past length may be symbolic) whose data reaches, through the ops a cache passes on its way (the
  append and its crops, repeat_kv, the K^T forms, a scale), an attention MatMul (or Einsum): a **key** when
  the MatMul's output flows to a Softmax (Q x K^T), a **value** when its other operand comes from a Softmax
  (P x V). The Softmax pairs a layer's key with its value; layers are numbered by the Q x K^T MatMul's
  position in the graph (ONNX nodes are in topological order);
- with onnxruntime's GroupQueryAttention (com.microsoft), the past key and value are the node's inputs 3
  and 4 (`past_key`, `past_value`; onnxruntime's ContribOperators.md) and the presents its outputs 1 and
  2; the layer is numbered by the node's position;
- a past's present is the one graph output its data reaches before the attention (the append's Concat,
  or the crop Slice after it).

What the structure does not decide is refused, coded, naming the inputs and saying what to rename: a
past that reaches both a Q x K^T and a P x V, or the attention of two layers; a layer with a key and no
value (or two keys); counts of keys and values that differ. Nothing is renamed when any input already has
a standard name (the names are then the export's own, read as today).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import TensorProto

from ..contract.errors import NPUError

PAST, PRESENT = "past_key_values.{i}.{kv}", "present.{i}.{kv}"
_FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
# what a cache passes through between its input and the attention MatMul: the append and its crops,
# repeat_kv (Unsqueeze -> Expand -> Reshape), the K^T forms (4-D Transpose, 3-D Reshape / Transpose),
# sdpa's sqrt(scale) on K, casts
_CARRY = {"Concat", "Slice", "Transpose", "Reshape", "Expand", "Unsqueeze", "Squeeze", "Tile", "Mul", "Div",
          "Cast", "Identity"}  # fmt: skip
# between Q x K^T and its Softmax: the scale, the mask, a softcap (Div, Tanh, Mul), casts
_TO_SOFTMAX = {"Mul", "Div", "Add", "Sub", "Where", "Tanh", "Cast", "Identity", "Reshape", "Max", "Min"}
# between a Softmax and P x V: sdpa's NaN guard (IsNaN -> Where), dropout, casts
_FROM_SOFTMAX = {"Where", "Cast", "Identity", "Dropout", "Reshape"}
_MATMULS = {"MatMul", "Einsum"}
_DEPTH = 12  # ops walked from a past, or from Q x K^T to its Softmax: a layer's attention is a few ops


@dataclass
class Layer:
    """One layer's cache: its past inputs, its presents (None when not found) and the topological index
    of the node that numbers it (the Q x K^T MatMul or the GroupQueryAttention)."""

    index: int
    key: str
    value: str
    present_key: str | None = None
    present_value: str | None = None


def _refuse(what: str) -> NPUError:
    return NPUError(
        "ERR_OP_NOT_SUPPORTED",
        f"cannot tell the decoder's KV-cache inputs apart by data flow: {what}; rename the inputs "
        "past_key_values.{i}.key / past_key_values.{i}.value (i the layer, from 0; a key is read by Q x K^T, "
        "a value by P x V) and their outputs present.{i}.key / present.{i}.value",
    )


class _Graph:
    def __init__(self, graph: onnx.GraphProto):
        self.nodes = list(graph.node)
        self.index = {id(n): k for k, n in enumerate(self.nodes)}
        self.readers: dict[str, list] = {}
        self.producer: dict[str, onnx.NodeProto] = {}
        for node in self.nodes:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
            for name in node.output:
                self.producer[name] = node
        self.outputs = {o.name for o in graph.output}

    def name(self, node: onnx.NodeProto) -> str:
        return node.name or f"{node.op_type} #{self.index[id(node)]}"

    def carried(self, past: str) -> tuple[list, list]:
        """(the MatMuls `past` reaches through _CARRY ops, each with the operand it arrives at; the graph
        outputs it reaches on the way)."""
        seen, frontier, matmuls, presents = {past}, [past], [], []
        for _ in range(_DEPTH):
            nxt = []
            for name in frontier:
                if name in self.outputs and name != past:
                    presents.append(name)
                for node in self.readers.get(name, []):
                    if node.op_type in _MATMULS:
                        matmuls.append((node, list(node.input).index(name)))
                    elif node.op_type in _CARRY:
                        nxt += [o for o in node.output if o and o not in seen]
                        seen.update(node.output)
            frontier = nxt
        return matmuls, presents

    def softmax_after(self, node: onnx.NodeProto) -> onnx.NodeProto | None:
        """The Softmax the output of `node` flows to through _TO_SOFTMAX ops, else None."""
        frontier = list(node.output)
        for _ in range(_DEPTH):
            nxt = []
            for name in frontier:
                for reader in self.readers.get(name, []):
                    if reader.op_type == "Softmax":
                        return reader
                    if reader.op_type in _TO_SOFTMAX:
                        nxt += list(reader.output)
            frontier = nxt
        return None

    def softmax_before(self, name: str) -> onnx.NodeProto | None:
        """The Softmax `name` comes from through _FROM_SOFTMAX ops (their first computed input), else None."""
        for _ in range(_DEPTH):
            node = self.producer.get(name)
            if node is None:
                return None
            if node.op_type == "Softmax":
                return node
            if node.op_type not in _FROM_SOFTMAX:
                return None
            # Where(IsNaN(p), 0, p): the probabilities are the last input; the others' first input
            name = node.input[-1] if node.op_type == "Where" else node.input[0]
        return None


def _candidates(graph: onnx.GraphProto) -> list[str]:
    """Rank-4 float graph inputs with static dims 1 and 3, not initializers."""
    inits = {t.name for t in graph.initializer}
    found = []
    for vi in graph.input:
        t = vi.type.tensor_type
        dims = t.shape.dim
        if vi.name in inits or t.elem_type not in _FLOATS or len(dims) != 4:
            continue
        if dims[1].HasField("dim_value") and dims[3].HasField("dim_value"):
            found.append(vi.name)
    return found


def _roles(g: _Graph, past: str) -> list[tuple[str, onnx.NodeProto, onnx.NodeProto]]:
    """(role, the attention MatMul, its Softmax) of each attention MatMul `past` reaches."""
    roles = []
    for node, operand in g.carried(past)[0]:
        other = [i for k, i in enumerate(node.input) if k != operand and i]
        probs = g.softmax_before(other[0]) if len(other) == 1 else None
        scores = g.softmax_after(node)
        if probs is not None:
            roles.append(("value", node, probs))
        if scores is not None:
            roles.append(("key", node, scores))
    return roles


def _attention_layers(g: _Graph, graph: onnx.GraphProto) -> list[Layer]:
    """The layers of attention written out (Q x K^T -> Softmax -> P x V)."""
    by_softmax: dict[int, dict] = {}
    for past in _candidates(graph):
        roles = _roles(g, past)
        if not roles:
            continue  # not a cache input: it reaches no attention
        kinds = {r for r, _, _ in roles}
        if len(kinds) > 1:
            qk = next(g.name(m) for r, m, _ in roles if r == "key")
            pv = next(g.name(m) for r, m, _ in roles if r == "value")
            raise _refuse(f"input {past!r} reaches both a Q x K^T ({qk!r}) and a P x V ({pv!r})")
        softmaxes = {id(s): s for _, _, s in roles}
        if len(softmaxes) > 1:
            names = sorted(g.name(s) for s in softmaxes.values())
            raise _refuse(f"input {past!r} reaches the attention of {len(names)} layers (Softmax {names})")
        (kind,) = kinds
        _, matmul, softmax = roles[0]
        slot = by_softmax.setdefault(id(softmax), {"softmax": softmax})
        if kind in slot:
            pair = " and ".join(repr(n) for n in sorted((slot[kind][0], past)))
            raise _refuse(f"inputs {pair} are both the {kind} of Softmax {g.name(softmax)!r}")
        slot[kind] = (past, matmul)
    keys = sorted(s["key"][0] for s in by_softmax.values() if "key" in s)
    values = sorted(s["value"][0] for s in by_softmax.values() if "value" in s)
    if len(keys) != len(values):
        raise _refuse(f"{len(keys)} key inputs {keys} but {len(values)} value inputs {values}")
    layers = []
    for slot in sorted(by_softmax.values(), key=lambda slot: g.index[id(slot["softmax"])]):
        if "key" not in slot or "value" not in slot:
            have = slot.get("key", slot.get("value"))[0]
            role = "key" if "key" in slot else "value"
            raise _refuse(f"input {have!r} is the {role} of Softmax {g.name(slot['softmax'])!r}, which has no "
                          f"{'value' if role == 'key' else 'key'} input")  # fmt: skip
        layers.append(Layer(g.index[id(slot["key"][1])], slot["key"][0], slot["value"][0]))
    return layers


def _gqa_layers(g: _Graph, graph: onnx.GraphProto) -> list[Layer]:
    """The layers of onnxruntime's GroupQueryAttention: past_key / past_value are its inputs 3 / 4,
    present_key / present_value its outputs 1 / 2."""
    inputs = {i.name for i in graph.input}
    layers = []
    for node in g.nodes:
        if node.op_type != "GroupQueryAttention" or len(node.input) < 5:
            continue
        key, value = node.input[3], node.input[4]
        if key in inputs and value in inputs:
            outs = [o if o in g.outputs else None for o in node.output[1:3]]
            layers.append(Layer(g.index[id(node)], key, value, *outs, *[None] * (2 - len(outs))))
    return layers


def find(graph: onnx.GraphProto) -> list[Layer]:
    """The decoder's cache layers in graph order, found by data flow (module docstring); [] when the
    graph has none.

    Raises NPUError ERR_OP_NOT_SUPPORTED naming the inputs when the structure is ambiguous: a past reaching
    both roles or two layers, two keys (or values) of one layer, a layer without both, counts that differ.
    """
    g = _Graph(graph)
    layers = _gqa_layers(g, graph)
    gqa = {n for layer in layers for n in (layer.key, layer.value)}
    for layer in _attention_layers(g, graph):
        if layer.key not in gqa and layer.value not in gqa:
            layers.append(layer)
    for layer in layers:
        for kv in ("key", "value"):
            if getattr(layer, f"present_{kv}") is None:
                presents = sorted(set(g.carried(getattr(layer, kv))[1]))
                setattr(layer, f"present_{kv}", presents[0] if len(presents) == 1 else None)
    used = [n for layer in layers for n in (layer.key, layer.value)]
    twice = sorted({n for n in used if used.count(n) > 1})
    if twice:
        raise _refuse(f"input {twice[0]!r} is the cache of two layers")
    return sorted(layers, key=lambda layer: layer.index)


def _rename_all(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Every use of each name in `names` renamed, in subgraphs (If / Loop bodies) too."""
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        vi.name = names.get(vi.name, vi.name)
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                _rename_all(sub, names)


def standardize(model: onnx.ModelProto) -> dict[str, str]:
    """Rename, in place, the cache inputs `find` gives to past_key_values.{i}.key/value and their presents
    to present.{i}.key/value, when no graph input has a standard past name (and no output a standard
    present name, for the presents); returns {old name: new name} ({} when nothing was renamed).

    Raises NPUError ERR_OP_NOT_SUPPORTED for an ambiguous structure (`find`) or a standard name that
    another tensor of the graph already has.
    """
    graph = model.graph
    if any(i.name.startswith("past_key_values.") for i in graph.input):
        return {}
    layers = find(graph)
    renames = {}
    keep_presents = any(o.name.startswith("present.") for o in graph.output)
    for i, layer in enumerate(layers):
        for kv in ("key", "value"):
            renames[getattr(layer, kv)] = PAST.format(i=i, kv=kv)
            present = getattr(layer, f"present_{kv}")
            if present is not None and not keep_presents:
                renames[present] = PRESENT.format(i=i, kv=kv)
    taken = {n for node in graph.node for n in (*node.input, *node.output)}
    taken |= {t.name for t in graph.initializer} | {v.name for v in [*graph.input, *graph.output]}
    clash = sorted(new for new in renames.values() if new in taken - renames.keys())
    if clash:
        raise _refuse(f"the standard name {clash[0]!r} is already another tensor's")
    _rename_all(graph, {old: new for old, new in renames.items() if old != new})
    return renames
