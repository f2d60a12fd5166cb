"""The attention mask of a decoder export, rebuilt from the step model's `position`.

A decoder-with-past export builds its mask from `attention_mask` (padding) and the past length (the
causal part). With the past length fixed at T - S for folding, the causal part became a constant that
says "query s sees rows t <= T - S + s", right only when the cache is full. The step model needs
"t <= position + s" for a run-time `position`.

The mask is found, not assumed: the *cone* of `attention_mask` is every node computed from it and
constants only; the cone's *frontier* is what the rest of the graph reads (in Hugging Face's exports,
one additive [1, 1, S, T] mask that every layer adds to its scores). Each frontier tensor is evaluated
(onnx's reference evaluator) for a few attention masks and must equal the causal-and-padding mask in
one known encoding: additive (0 where seen, one negative value where hidden) or boolean (True where
seen, or True where hidden). Only then is it replaced by the same encoding of t <= position + s;
anything else is a coded error naming the tensor.

A sliding window W < T (Mistral, Qwen2's use_sliding_window, Gemma2's local layers) is a band: query s
sees rows position + s - W < t <= position + s. Its W is read off the export's mask (the rows the last
query sees with no padding), the band is checked like the causal mask and rebuilt from `position` the
same way. A layer whose export crops its cache to W - 1 past rows (decoder_forms/sliding_crop.py) must
have a mask that hides at least the rows the crop drops, since the step model reads the whole cache.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ..contract.errors import NPUError
from .decoder_fold import opset_of

_HIDDEN_MAX = -1e4  # an additive mask hides a row with a value at most this (HF uses finfo.min)
_FP16_MAX = 65504.0  # the largest finite fp16: an NPU input beyond it is saturated, and counted and warned


def _cone(graph: onnx.GraphProto, source: str, consts: set[str]) -> tuple[list[onnx.NodeProto], list[str]]:
    """The nodes computed from `source` and constants only, and the cone tensors read outside it."""
    cone_tensors = {source}
    nodes = []
    for node in graph.node:
        inputs = [i for i in node.input if i]
        if any(i in cone_tensors for i in inputs) and all(i in cone_tensors or i in consts for i in inputs):
            nodes.append(node)
            cone_tensors.update(node.output)
    in_cone = {id(n) for n in nodes}
    read_outside = {i for n in graph.node if id(n) not in in_cone for i in n.input}
    read_outside |= {o.name for o in graph.output}
    return nodes, [t for t in cone_tensors if t in read_outside]


def _evaluate(model, nodes, frontier, values, mask: np.ndarray) -> list[np.ndarray]:
    used = {i for n in nodes for i in n.input}
    graph = helper.make_graph(
        nodes,
        "mask",
        [helper.make_tensor_value_info("attention_mask", helper.np_dtype_to_tensor_dtype(mask.dtype), mask.shape)],
        [helper.make_empty_tensor_value_info(f) for f in frontier],
        [numpy_helper.from_array(v, k) for k, v in values.items() if k in used],
    )
    sub = helper.make_model(graph, opset_imports=list(model.opset_import))
    sub.ir_version = model.ir_version
    return list(ReferenceEvaluator(sub).run(None, {"attention_mask": mask}))


def _encoding(name: str, got: np.ndarray, keep: np.ndarray) -> tuple[str, float | None]:
    """How `got` encodes `keep` ([S, T] bool, True where a row is seen): ("keep" | "hide" | "add", the
    additive value of a hidden row; None when nothing is hidden)."""
    if not 2 <= got.ndim <= 4 or got.shape[-2:] != keep.shape:
        raise _not_causal(name, f"of shape {list(got.shape)}, not [..., {keep.shape[0]}, {keep.shape[1]}]")
    slices = got.reshape(-1, *keep.shape)
    if any(not np.array_equal(one, slices[0]) for one in slices[1:]):
        raise _not_causal(name, "a mask that differs between heads")
    got = slices[0]
    if got.dtype == np.bool_:
        if np.array_equal(got, keep):
            return "keep", None
        if np.array_equal(got, ~keep):
            return "hide", None
        raise _not_causal(name, "a boolean mask that is not causal-and-padding")
    if np.issubdtype(got.dtype, np.floating):
        hidden = np.unique(got[~keep])
        if np.all(got[keep] == 0) and hidden.size <= 1 and np.all(hidden <= _HIDDEN_MAX):
            # nothing hidden (all ones, one token): the value comes from the other trials
            return "add", float(hidden[0]) if hidden.size else None
    raise _not_causal(name, "not 0 where a row is seen and one large negative value where it is hidden")


def _not_causal(name: str, why: str) -> NPUError:
    return NPUError(
        "ERR_OP_NOT_SUPPORTED",
        f"no causal attention mask built from attention_mask: {name} is {why}; the importer rebuilds the "
        "mask from `position` only when the export's mask is causal (or a sliding window's band) AND "
        "attention_mask (Hugging Face's)",
    )


def _unevaluable(err: Exception, total: int, crops: dict[int, int]) -> NPUError:
    why = f"the export's mask fails to compute for a cache of {total} rows ({type(err).__name__}: {err})"
    if not crops:
        return _not_causal("attention_mask", why)
    layer, window = min(crops.items())
    return NPUError(
        "ERR_OP_NOT_SUPPORTED",
        f"layer {layer}: a sliding window of {window} rows < max_context {total}, and {why}: a mask written for "
        "the cropped cache only (torch.onnx's dynamo exporter writes transformers' sliding-window mask so), which "
        "the step model's whole cache breaks; export with the TorchScript exporter (torch.onnx.export(dynamo="
        f"False)), whose mask the importer rebuilds, or compile with max_context <= {window}",
    )


def _window(got: np.ndarray, seq: int, total: int) -> int | None:
    """W when the mask `got` (of the all-ones attention_mask) shows the last query fewer than all `total`
    rows (a sliding window's band), else None (causal, or a mask _encoding refuses)."""
    if got.ndim < 2 or got.shape[-2:] != (seq, total):
        return None
    last = got.reshape(-1, seq, total)[0, -1]
    seen = (last if last[-1] else ~last) if got.dtype == np.bool_ else last == 0
    count = int(seen.sum())
    return count if 0 < count < total else None


def _keep(seq: int, total: int, window: int | None) -> np.ndarray:
    """[S, T] bool: row t seen by query s at total - seq + s (causal; with a window, the last W rows)."""
    rows, tokens = np.arange(total)[None, :], total - seq + np.arange(seq)[:, None]
    keep = rows <= tokens
    return keep & (rows > tokens - window) if window else keep


def _trials(seq: int, total: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Attention masks to evaluate the cone with: all ones, then padding patterns (the last `seq`
    columns, this call's tokens, always seen)."""
    masks = [np.ones(total, np.int64)]
    for _ in range(2):
        m = rng.integers(0, 2, total).astype(np.int64)
        m[0] = 0  # at least one row hidden by padding, where there are past rows
        m[total - seq :] = 1
        masks.append(m)
    return masks


def _step_mask(name: str, encoding: tuple[str, float], shape: tuple[int, ...], dtype, seq: int, total: int, opset,
               window: int | None = None):  # fmt: skip
    """Nodes computing the frontier tensor `name` from `position`: row t hidden from token s when
    position + s < t, as Unsqueeze -> Less -> Where (or Not) -> Expand; with a window W also when
    t + W - 1 < position + s (a second Less, Or). The additive causal form is the mask of
    `tvm_npu.models.decoder`'s step models, which the resident cache recognises and derives from the
    position register instead (partition/kv_cache_check.py); the band stays on the host-held cache."""
    p = f"{name}/step_"
    inits = [
        numpy_helper.from_array(np.arange(seq, dtype=np.int64), p + "steps"),
        numpy_helper.from_array(np.arange(total, dtype=np.int64).reshape(1, total), p + "rows"),
        numpy_helper.from_array(np.array(shape, np.int64), p + "shape"),
    ]
    if opset >= 13:  # Unsqueeze's axes: an input since opset 13, an attribute before
        inits.append(numpy_helper.from_array(np.array([1], np.int64), p + "axis"))
        unsqueeze = helper.make_node("Unsqueeze", [p + "tokens", p + "axis"], [p + "column"])
    else:
        unsqueeze = helper.make_node("Unsqueeze", [p + "tokens"], [p + "column"], axes=[1])
    nodes = [
        helper.make_node("Add", ["position", p + "steps"], [p + "tokens"]),  # [S]: position + s
        unsqueeze,  # [S, 1]
        helper.make_node("Less", [p + "column", p + "rows"], [p + "later"]),  # [S, T]: t after the token
    ]
    if window:  # t + W - 1 < position + s: before the window; hidden = later or earlier
        first = np.arange(total, dtype=np.int64).reshape(1, total) + (window - 1)
        inits.append(numpy_helper.from_array(first, p + "rows_last"))
        nodes.append(helper.make_node("Less", [p + "rows_last", p + "column"], [p + "earlier"]))
        nodes.append(helper.make_node("Or", [p + "later", p + "earlier"], [p + "outside"]))
        outside = p + "outside"
    else:
        outside = p + "later"
    kind, value = encoding
    if kind == "keep":
        nodes.append(helper.make_node("Not", [outside], [p + "mask"]))
    elif kind == "add":
        zero = numpy_helper.from_array(np.zeros((), dtype), p + "zero")
        hide = numpy_helper.from_array(np.array(value, dtype), p + "hidden")
        inits += [zero, hide]
        nodes.append(helper.make_node("Where", [outside, p + "hidden", p + "zero"], [p + "mask"]))
    else:
        nodes.append(helper.make_node("Identity", [outside], [p + "mask"]))
    nodes.append(helper.make_node("Expand", [p + "mask", p + "shape"], [name]))
    return nodes, inits


def _fp16_safe(value: float) -> float:
    """The hidden value of the rebuilt mask: the export's, or -inf for one beyond the fp16 range (float32's
    minimum, what transformers writes). Staged into an fp16 NPU input (a host-held cache) such a value would
    saturate to -65504 on every call, with the runtime's warning; -inf stages as itself (docs/npu.md section
    2) and gives the same softmax as the export: exp(z) of a hidden score is 0.0 exactly in float32 for
    either value, and every query row sees its own row, so no row is hidden whole (which would be NaN)."""
    return -np.inf if value < -_FP16_MAX else value


def _scores_mask(graph: onnx.GraphProto, keys: str, frontier: set[str]) -> str | None:
    """The frontier tensor the attention of the cache `keys` adds to its scores: the first one read on
    the way down from the keys (breadth first: Q x K^T, its factors and softcap, then the mask)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    level, seen = [keys], {keys}
    for _ in range(16):
        nxt = []
        for tensor in level:
            for node in readers.get(tensor, []):
                hit = [i for i in node.input if i in frontier]
                if hit:
                    return hit[0]
                nxt += [o for o in node.output if o not in seen]
                seen.update(node.output)
        level = nxt
    return None


def _check_crops(graph: onnx.GraphProto, crops: dict[int, int], windows: dict[str, int | None]) -> None:
    """Each cropped layer's mask hides the rows its crop drops: a band of at most the crop's window."""
    for layer, crop in sorted(crops.items()):
        name = _scores_mask(graph, f"cache_out.{layer}.key", set(windows))
        band = windows.get(name) if name is not None else None
        if name is None or band is None or band > crop:
            sees = "no mask built from attention_mask" if name is None else f"its mask {name}, which shows "
            sees += "" if name is None else "every earlier row (causal)" if band is None else f"the last {band} rows"
            raise NPUError(
                "ERR_OP_NOT_SUPPORTED",
                f"layer {layer}: the export keeps only the last {crop - 1} past rows of its cache (a sliding "
                f"window of {crop}) but its scores take {sees}; the step model reads every cache row, so "
                "the mask must hide the rows the crop drops: export the layer with its sliding-window mask "
                "(transformers' own for a config with sliding_window), or compile with max_context <= the window",
            )


def rebuild_mask(model: onnx.ModelProto, values: dict[str, np.ndarray], seq: int, total: int,
                 crops: dict[int, int] | None = None) -> None:  # fmt: skip
    """Replace the export's mask (from `attention_mask`, checked as described above) by one computed
    from the graph input `position` [1]; `attention_mask` is then read by nothing. `crops`: the sliding
    window of each layer whose cache the export crops (decoder_cache.write_caches)."""
    graph = model.graph
    nodes, frontier = _cone(graph, "attention_mask", set(values))
    if not frontier:
        raise _not_causal("attention_mask", "read by nothing")
    rng = np.random.default_rng(0)
    opset = opset_of(model)
    trials = _trials(seq, total, rng)
    try:
        outs = [_evaluate(model, nodes, frontier, values, m.reshape(1, total)) for m in trials]
    except Exception as err:  # noqa: BLE001 - a mask that cannot be computed for T rows is one user error
        raise _unevaluable(err, total, crops or {}) from None
    new_nodes, new_inits, windows = [], [], {}
    for k, name in enumerate(frontier):
        window = windows[name] = _window(outs[0][k], seq, total)
        keeps = [_keep(seq, total, window) & (m[None, :] == 1) for m in trials]
        codes = [_encoding(name, out[k], keep) for keep, out in zip(keeps, outs)]
        kinds = {kind for kind, _ in codes}
        hidden = {value for _, value in codes if value is not None}
        if len(kinds) != 1 or len(hidden) > 1:
            raise _not_causal(name, "encoded differently for different attention masks")
        got = outs[0][k]
        value = hidden.pop() if hidden else float(np.finfo(got.dtype).min) if got.dtype != np.bool_ else 0.0
        value = _fp16_safe(value)
        n, i = _step_mask(name, (kinds.pop(), value), got.shape, got.dtype, seq, total, opset, window)
        new_nodes += n
        new_inits += i
    _check_crops(graph, crops or {}, windows)
    producers = {o for n in nodes for o in n.output if o in frontier}
    kept = [n for n in graph.node if not any(o in producers for o in n.output)]
    del graph.node[:]
    graph.node.extend(new_nodes + kept)
    graph.initializer.extend(new_inits)
