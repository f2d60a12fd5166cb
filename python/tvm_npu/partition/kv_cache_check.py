"""The KV cache of a step model (docs/llm.md) kept on the NPU: recognise, per layer, the cache write and
the attention that reads it, and refuse with a reason everything the resident form cannot do exactly.

One layer of a step model, as TVM imports `tvm_npu.models.decoder`'s ONNX:

    keys   = scatter_nd(cache.{i}.key, idx, k_new)        idx: (0, head, position + s) per row
    values = scatter_nd(cache.{i}.value, idx, v_new)
    [repeat_kv: expand_dims(axis 2) -> broadcast_to -> reshape, for grouped-query attention]
    scores = matmul(q, permute_dims(keys, [0, 1, 3, 2])) [/ c or * c]
    [scores = tanh(scores / cap) * cap: an attention softcap, Gemma2's]
    probs  = softmax(scores + where(less(positions[:, None], arange(T)), M, 0), axis=-1)
                                       [the mask optionally broadcast to [1, 1, S, T]]
    out    = matmul(probs, values)                         cache_out.{i}.* = keys, values

With the cache resident, the layer becomes one NPU region (backend/kv_cache.py) whose inputs are q, k_new,
v_new and the position, and whose cache is two state slots: the new rows are stored at the position, rows
[0, p + S) read back, and the mask follows from the position register (causal SOFTMAX; a sliding
window's band from its window, format 1.6), so the mask, the scatter and the cache copies leave the
graph. `find_layers` returns every layer's match, or the rejections
that keep the whole model on the host-held cache (all layers resident or none: a step model's signature
is either with its cache or without it). The constraints' docstrings are the user-facing reasons.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tvm import relax

from ..contract.config import NPUConfig
from ..ir.graph import Graph, op_name
from ..ir.values import constant_value, dtype_of, static_shape
from .constraints import Rejection

# The largest mask value that still reads as "hidden": exp(M - max) is 0 in float32 for any score
# within fp16 range (|x| <= 65504 times the scale), as SOFTMAX's causal mode gives.
MASK_LIMIT = -1e5


@dataclass
class KVLayer:
    """One layer's resident attention: its inputs, output and shapes (docs/npu.md section 3)."""

    layer: int
    q: relax.Var  # [1, H, S, D] float32
    k_new: relax.Var  # [1, H_kv, S, D]
    v_new: relax.Var
    out: relax.Var  # [1, H, S, D], P x V
    scale: float  # the factor of the scores (1 / c for a division by c)
    heads: int
    kv_heads: int
    seq: int
    max_context: int
    head_dim: int
    ops: list = field(default_factory=list)  # (var name, op name) of every binding the region replaces
    cache_vars: tuple = ()  # (keys, values): the scatter results main returned as cache_out
    softcap: float = 0.0  # cap of an attention softcap tanh(scale * s / cap) * cap before the mask; 0: none
    window: int = 0  # W of a sliding window's band (query at q sees rows q - W < t <= q); 0: plain causal


# --- constraints: docstring = reason shown to the user; first word of the code = reason code ---


def constraint_kv_cache_dtype(cache):
    """NPU_E_DTYPE: a resident KV cache must be a float32 cache of the step model (kept as fp16 rows on
    the NPU); an int8 or other cache stays held by the host."""
    return None if dtype_of(cache) == "float32" else f"cache dtype {dtype_of(cache)}"


def constraint_kv_cache_shape(cache, info: dict):
    """NPU_E_KV_CACHE: a resident cache is [1, H_kv, T, D] as the step metadata says (kv_heads, max_context,
    head_dim), written by one ScatterND per layer at indices (0, head, position + s) for the S new rows
    [1, H_kv, S, D] of this call; other cache layouts or writes stay held by the host."""
    want = (1, info["kv_heads"], info["max_context"], info["head_dim"])
    got = static_shape(cache)
    return None if got == want else f"cache {got}, the metadata says {want}"


def constraint_kv_attention(what: str):
    """NPU_E_KV_CACHE: a resident cache is read only by attention of the form Q x K^T (the scores divided or
    multiplied by one float32 constant, or Q and K^T multiplied by one each; keys optionally repeated for
    grouped-query attention as Unsqueeze -> Expand -> Reshape), plus the causal mask, Softmax over the
    last axis (optionally followed by where(isnan(P), 0, P)), P x V; the updated cache is otherwise only
    returned as cache_out, and no other op reads the attention's intermediate tensors. Another form
    stays on the host-held cache."""
    return what


def constraint_kv_mask(what: str):
    """NPU_E_MASK: the mask added to a resident cache's scores must be the causal mask of the positions:
    where(position + s < t, M, 0) for cache row t (Less + Where; [S, T], or broadcast to [1, 1, S, T]),
    or a sliding window's band, where(position + s < t or t + W - 1 < position + s, M, 0) (Less, Less,
    Or: frontend/decoder_mask.py's), with M a float32 constant at most -1e5 (its exp is 0, as SOFTMAX's
    causal mode gives), so the NPU derives it from the position register (and the band from SOFTMAX's
    window); another mask stays on the host-held cache."""
    return what


def constraint_kv_softcap(what: str):
    """NPU_E_KV_CACHE: an attention softcap between the scores and the mask is resident when it is
    tanh(s / cap) * cap (Gemma2's attn_logit_softcapping: a Div by cap or a Mul by 1 / cap, Tanh, a Mul
    by cap; float32 constants) with the scores' factor over cap an fp16 normal number (6.1e-5 to 65504
    in magnitude): the region multiplies the scores by that factor rounded to fp16 (ELTWISE), takes
    their tanh (UNARY) and gives cap to the causal SOFTMAX as its scale. Another form (other factors
    around the tanh, or a factor fp16 cannot hold) stays on the host-held cache, computed exactly."""
    return what


def constraint_kv_fits(layer: KVLayer, cfg: NPUConfig):
    """NPU_E_SRAM: the resident attention of one KV head keeps that head's T cache rows of keys and of values
    in SRAM with its query heads' queries, scores, probabilities and outputs (S rows each); when they do
    not fit, the step keeps the host-held cache. A smaller max_context, or a configuration with more SRAM,
    keeps it on the NPU."""
    need = kv_sram_bytes(layer, cfg)
    return f"one KV head needs {need} bytes of SRAM > {cfg.sram_bytes}" if need > cfg.sram_bytes else None


def kv_sram_bytes(layer: KVLayer, cfg: NPUConfig) -> int:
    """SRAM of one KV head's attention (the plan in backend/plan/kv_plan.py): q, k_new, v_new, the output,
    T key and T value rows, the scores and probabilities [g * S, T] (and a softcap's factor)."""
    a = cfg.alignment
    line = lambda elems: -(-elems * 2 // a) * a  # noqa: E731 (an fp16 SRAM row)
    g, S, T, D = layer.heads // layer.kv_heads, layer.seq, layer.max_context, layer.head_dim
    cap = a if layer.softcap else 0  # the softcap's fp16 factor, one aligned row
    return (2 * g * S + 2 * S + 2 * T) * line(D) + 2 * g * S * line(T) + cap


KV_CONSTRAINTS = [
    constraint_kv_cache_dtype,
    constraint_kv_cache_shape,
    constraint_kv_attention,
    constraint_kv_mask,
    constraint_kv_softcap,
    constraint_kv_fits,
]


def _reject(log: list, var, constraint, detail: str) -> None:
    code, reason = constraint.__doc__.split(":", 1)
    name = var.name if var is not None else ""
    log.append(Rejection(name, "kv_cache", "npu.kv_attention", code, " ".join(reason.split()), detail))


class _NoMatch(Exception):
    def __init__(self, constraint, var, detail: str):
        super().__init__(detail)
        self.constraint, self.var, self.detail = constraint, var, detail


def _call(g: Graph, var, *names: str):
    """The call bound to `var` if it is one of the ops `names` (without "relax."), else None."""
    value = g.value.get(var)
    return value if op_name(value) in {f"relax.{n}" for n in names} else None


def _int_const(expr, want) -> bool:
    value = constant_value(expr)
    return value is not None and value.shape == np.shape(want) and np.array_equal(value, want)


def _positions(g: Graph, var, position, S: int) -> bool:
    """`var` is position + arange(S) (int64 [S]): the absolute position of each token."""
    add = _call(g, var, "add")
    if add is None:
        return False
    a, b = add.args
    steps = np.arange(S, dtype=np.int64)
    return (a.same_as(position) and _int_const(b, steps)) or (b.same_as(position) and _int_const(a, steps))


def _unwrap_negative_index(g: Graph, expr):
    """The importer's where(x < 0, x + shape, x) around ScatterND's indices: x (positions are >= 0 here,
    the runtime refuses a negative one)."""
    where = _call(g, expr, "where")
    if where is not None and isinstance(where.args[2], relax.Var):
        cond = _call(g, where.args[0], "less")
        if cond is not None and cond.args[0].same_as(where.args[2]):
            return where.args[2]
    return expr


def _check_indices(g: Graph, idx, position, S: int, H_kv: int) -> None:
    x = _unwrap_negative_index(g, idx)
    cat = _call(g, x, "concat")
    shape = (1, H_kv, S, 1)
    ok = cat is not None and int(cat.attrs.axis) == 3 and len(cat.args[0].fields) == 3
    if ok:
        zero, head, rows = cat.args[0].fields
        heads = np.broadcast_to(np.arange(H_kv, dtype=np.int64)[None, :, None, None], shape)
        ok = _int_const(zero, np.zeros(shape, np.int64)) and _int_const(head, heads)
        bcast = _call(g, rows, "broadcast_to") if ok else None
        ok = bcast is not None and static_shape(bcast) == shape
        reshape = _call(g, bcast.args[0], "reshape") if ok else None
        ok = reshape is not None and static_shape(reshape) == (1, 1, S, 1)
        ok = ok and _positions(g, reshape.args[0], position, S)
    if not ok:
        raise _NoMatch(constraint_kv_cache_shape, idx, "the ScatterND indices are not (0, head, position + s)")


def _unit_broadcast(g: Graph, mask, S: int, T: int):
    """The [S, T] mask under a broadcast_to that only prepends unit dims ([1, 1, S, T], as the importer of
    Hugging Face exports writes it): the same value at every (s, t)."""
    bcast = _call(g, mask, "broadcast_to")
    if bcast is None:
        return mask
    shape, inner = static_shape(mask), static_shape(bcast.args[0])
    ok = shape is not None and inner == (S, T) and shape[-2:] == (S, T) and all(d == 1 for d in shape[:-2])
    return bcast.args[0] if ok else mask


def _band(g: Graph, cond, position, S: int, T: int) -> int | None:
    """W when `cond` is the band of a sliding window (decoder_mask.py's): less(column, arange(T)) or
    less(arange(T) + W - 1, column), column the positions as [S, 1]; else None."""
    either = _call(g, cond, "logical_or")
    later = _call(g, either.args[0], "less") if either is not None else None
    earlier = _call(g, either.args[1], "less") if either is not None else None
    if later is None or earlier is None or not earlier.args[1].same_as(later.args[0]):
        return None
    col = _unsqueeze_of(g, later.args[0], 1)
    first = constant_value(earlier.args[0])
    if col is None or not _positions(g, col, position, S) or first is None or first.shape != (1, T):
        return None
    window = int(first.reshape(-1)[0]) + 1
    ok = _int_const(later.args[1], np.arange(T, dtype=np.int64)[None, :]) and 0 < window < T
    return window if ok and np.array_equal(first.reshape(-1), np.arange(T) + window - 1) else None


def _check_mask(g: Graph, mask, position, S: int, T: int) -> int:
    """The band's W (0: causal) of the mask the scores take, after checking it is one of the two."""
    mask = _unit_broadcast(g, mask, S, T)
    where = _call(g, mask, "where")
    fail = _NoMatch(constraint_kv_mask, mask, "the mask is not where(position + s < arange(T), M, 0)")
    if where is None:
        raise fail
    cond, hidden, kept = where.args
    window = _band(g, cond, position, S, T)
    less = _call(g, _call(g, cond, "logical_or").args[0], "less") if window else _call(g, cond, "less")
    col = _unsqueeze_of(g, less.args[0], 1) if less is not None else None
    if col is None or not _positions(g, col, position, S):
        raise fail
    if not _int_const(less.args[1], np.arange(T, dtype=np.int64)[None, :]):
        raise fail
    m, z = constant_value(hidden), constant_value(kept)
    if m is None or z is None or m.size != 1 or z.size != 1 or m.dtype != np.float32 or float(z.reshape(-1)[0]) != 0:
        raise fail
    if not float(m.reshape(-1)[0]) <= MASK_LIMIT:
        raise _NoMatch(constraint_kv_mask, mask, f"M = {float(m.reshape(-1)[0]):.6g} > {MASK_LIMIT:g}")
    return window or 0


def _sole(g: Graph, var, what: str):
    """The one binding that reads `var` (an intermediate the region replaces must have no other reader)."""
    user = g.sole_use(var)
    if user is None:
        raise _NoMatch(constraint_kv_attention, var, f"{what} {var.name} is read by {len(g.uses.get(var, []))} ops")
    return user


def _scatter(g: Graph, cache, position, info: dict):
    """(the ScatterND of `cache`, its new rows) after checking the cache and the indices."""
    for c in (constraint_kv_cache_dtype, lambda x: constraint_kv_cache_shape(x, info)):
        why = c(cache)
        if why:
            raise _NoMatch(c if c is constraint_kv_cache_dtype else constraint_kv_cache_shape, cache, why)
    writes = [u for u in g.uses.get(cache, []) if u is not None and op_name(g.value[u]) == "relax.scatter_nd"]
    if len(writes) != 1 or not g.value[writes[0]].args[0].same_as(cache):
        raise _NoMatch(constraint_kv_cache_shape, cache, f"{len(writes)} ScatterND writes of {cache.name}")
    call = g.value[writes[0]]
    new = call.args[2]
    S, H_kv, D = info["seq_len"], info["kv_heads"], info["head_dim"]
    if str(call.attrs.reduction) != "update" or static_shape(new) != (1, H_kv, S, D) or dtype_of(new) != "float32":
        raise _NoMatch(constraint_kv_cache_shape, cache, f"ScatterND of {static_shape(new)} {dtype_of(new)} rows")
    _check_indices(g, call.args[1], position, S, H_kv)
    return writes[0], new


def _unsqueeze_of(g: Graph, var, axis: int):
    """x when `var` is x with a unit dim inserted at `axis`: expand_dims(x, axis), or the reshape it is
    (rewrite/views.py writes it so in a module the quantizer rewrote), else None."""
    e = _call(g, var, "expand_dims")
    if e is not None:
        return e.args[0] if [int(a) for a in e.attrs.axis] == [axis] else None
    r = _call(g, var, "reshape")
    inner, outer = (static_shape(r.args[0]), static_shape(var)) if r is not None else (None, None)
    if inner is None or outer is None or outer != (*inner[:axis], 1, *inner[axis:]):
        return None
    return r.args[0]


def _repeated(g: Graph, var, heads: int, info: dict) -> tuple:
    """(the var the attention reads the cache as, the repeat_kv bindings): `var` itself, or its
    Unsqueeze(2) -> Expand -> Reshape to [1, heads, T, D] (torch's repeat_kv; its Unsqueeze as _unsqueeze_of)."""
    H_kv, T, D = info["kv_heads"], info["max_context"], info["head_dim"]
    if heads == H_kv:
        return var, []
    ev = _sole_user(g, var)
    if _unsqueeze_of(g, ev, 2) is not None:
        bv = g.sole_use(ev)
        if _call(g, bv, "broadcast_to") is not None and static_shape(bv) == (1, H_kv, heads // H_kv, T, D):
            rv = g.sole_use(bv)
            if _call(g, rv, "reshape") is not None and static_shape(rv) == (1, heads, T, D):
                return rv, [ev, bv, rv]
    raise _NoMatch(constraint_kv_attention, var, f"the {H_kv} KV heads are not repeated to {heads} as repeat_kv")


def _factor(g: Graph, var, x) -> float | None:
    """c when `var` is x * c or x / c (as 1 / c) for one finite, non-zero float32 constant c, else None."""
    call = _call(g, var, "multiply", "divide")
    if call is None or not call.args[0].same_as(x):
        return None
    c = constant_value(call.args[1])
    if c is None or c.dtype != np.float32 or c.size != 1 or not np.isfinite(c).all() or float(c.reshape(-1)[0]) == 0:
        return None
    c = float(c.reshape(-1)[0])
    return 1.0 / c if op_name(call) == "relax.divide" else c


def _nan_guard(g: Graph, probs) -> tuple:
    """(what P x V reads, the guard's bindings): `probs` itself, or sdpa's where(isnan(P), 0, P) after the
    softmax, which never fires here: the causal mask leaves every query row at least cache row 0, so no
    row of the softmax is all hidden (and its exp sum never 0)."""
    readers = [u for u in g.uses.get(probs, []) if u is not None]
    if len(readers) != 2:
        return probs, []
    isnan = next((u for u in readers if _call(g, u, "isnan") is not None), None)
    where = _call(g, g.sole_use(isnan), "where") if isnan is not None else None
    if where is None or not where.args[0].same_as(isnan) or not where.args[2].same_as(probs):
        return probs, []
    zero = constant_value(where.args[1])
    if zero is None or zero.size != 1 or float(zero.reshape(-1)[0]) != 0 or g.sole_use(isnan) not in readers:
        return probs, []
    return g.sole_use(isnan), [isnan, g.sole_use(isnan)]


def _softcap(g: Graph, var, x, scale: float) -> tuple | None:
    """(cap, its three bindings) when `var` = x / cap (or x * (1 / cap)) starts tanh(x / cap) * cap;
    None when `var` is no factor of x followed by a tanh. A tanh with other factors around it, or a
    factor of the scores over cap that fp16 cannot hold, raises constraint_kv_softcap."""
    inv = _factor(g, var, x)
    tv = g.sole_use(var) if inv is not None else None
    if tv is None or _call(g, tv, "tanh") is None:
        return None
    mv = g.sole_use(tv)
    cap = _factor(g, mv, tv) if mv is not None else None
    if cap is None or abs(cap * inv - 1.0) >= 1e-6:
        raise _NoMatch(constraint_kv_softcap, tv, "the tanh of the scores is not tanh(s / cap) * cap")
    f = scale / cap  # the region's ELTWISE factor, rounded to fp16
    if not 2.0**-14 <= abs(f) <= 65504.0:
        raise _NoMatch(constraint_kv_softcap, tv, f"the scores' factor over the cap, {f:.6g}, is no fp16 normal")
    return cap, [var, tv, mv]


def _sole_user(g: Graph, var):
    users = [u for u in g.uses.get(var, []) if u is not None and not isinstance(g.value[u], relax.Tuple)]
    return users[0] if len(users) == 1 else None


def _match_layer(g: Graph, i: int, info: dict, position, result) -> KVLayer:
    ck, cv = g.params[2 + 2 * i], g.params[3 + 2 * i]
    keys, k_new = _scatter(g, ck, position, info)
    values, v_new = _scatter(g, cv, position, info)
    if result is None or not all(f.same_as(v) for f, v in zip(result.fields[1 + 2 * i : 3 + 2 * i], (keys, values))):
        raise _NoMatch(constraint_kv_attention, keys, f"cache_out.{i}.* are not layer {i}'s ScatterND results")
    for v in (keys, values):  # read by the attention (one op) and returned as cache_out, nothing else
        if _sole_user(g, v) is None or len(g.uses[v]) != 2:
            raise _NoMatch(constraint_kv_attention, v, f"{v.name} has {len(g.uses[v])} readers")
    S, T, D = info["seq_len"], info["max_context"], info["head_dim"]
    fv = _sole_user(g, keys)
    first = g.value[fv]
    heads = (static_shape(fv) or (0, 0))[1] if op_name(first) == "relax.permute_dims" else 0
    if _unsqueeze_of(g, fv, 2) is not None and g.sole_use(fv) is not None:
        bshape = static_shape(g.sole_use(fv)) or (0, 0, 0)
        heads = bshape[1] * bshape[2] if len(bshape) == 5 else 0
    if not heads or heads % info["kv_heads"]:
        raise _NoMatch(constraint_kv_attention, keys, f"the keys are read by {op_name(first) or 'no op'}")
    kin, krep = _repeated(g, keys, heads, info)
    vin, vrep = _repeated(g, values, heads, info)
    tv = _sole(g, kin, "the keys") if krep else _sole_user(g, kin)
    t = _call(g, tv, "permute_dims")
    if t is None or [int(a) for a in t.attrs.axes] != [0, 1, 3, 2]:
        raise _NoMatch(constraint_kv_attention, kin, "the keys are not transposed to [1, H, D, T]")
    qkv, kt, scale = _sole(g, tv, "K^T"), tv, 1.0
    ops = [*krep, tv]
    c = _factor(g, qkv, tv)  # sdpa scales K^T (and Q) by the square root of the scale each
    if c is not None:
        ops.append(qkv)
        qkv, kt, scale = _sole(g, qkv, "the scaled K^T"), qkv, c
    qk = _call(g, qkv, "matmul")
    if qk is None or not qk.args[1].same_as(kt) or static_shape(qk.args[0]) != (1, heads, S, D):
        raise _NoMatch(constraint_kv_attention, kt, "K^T is not the second operand of a [1, H, S, D] query matmul")
    q = qk.args[0]
    scaled_q = _call(g, q, "multiply")
    c = _factor(g, q, scaled_q.args[0]) if scaled_q is not None and g.sole_use(q) is not None else None
    if c is not None:  # the query's factor joins the scale; the region reads the query before it
        ops.append(q)
        q, scale = scaled_q.args[0], scale * c
    ops.append(qkv)
    x = qkv
    nxt = _sole(g, x, "the scores")
    cap = _softcap(g, nxt, x, scale)
    if cap is None and _call(g, nxt, "divide", "multiply") is not None:
        c = _factor(g, nxt, x)
        if c is None:
            raise _NoMatch(constraint_kv_attention, nxt, "the scores' factor is not one finite float32 constant")
        scale *= c
        ops.append(nxt)
        x, nxt = nxt, _sole(g, nxt, "the scaled scores")
        cap = _softcap(g, nxt, x, scale)
    softcap = 0.0
    if cap is not None:  # tanh(s / cap) * cap: ELTWISE, UNARY and the SOFTMAX's scale in the region
        softcap, capped = cap
        ops += capped
        x, nxt = capped[-1], _sole(g, capped[-1], "the capped scores")
    add = _call(g, nxt, "add")
    if add is None:
        raise _NoMatch(constraint_kv_mask, nxt, "the scores take no causal mask")
    mask = add.args[1] if add.args[0].same_as(x) else add.args[0]
    window = _check_mask(g, mask, position, S, T)
    ops.append(nxt)
    sv = _sole(g, nxt, "the masked scores")
    sm = _call(g, sv, "nn.softmax")
    if sm is None or int(sm.attrs.axis) not in (-1, 3):
        raise _NoMatch(constraint_kv_attention, sv, "the masked scores do not go to a softmax over the last axis")
    ops.append(sv)
    probs, guard = _nan_guard(g, sv)
    ops += guard
    pvv = _sole(g, probs, "the probabilities")
    pv = _call(g, pvv, "matmul")
    vuser = _sole(g, vin, "the values") if vrep else _sole_user(g, vin)
    if (
        pv is None
        or vuser is None
        or not pvv.same_as(vuser)
        or not pv.args[0].same_as(probs)
        or not pv.args[1].same_as(vin)
    ):
        raise _NoMatch(constraint_kv_attention, pvv, "the probabilities and the values are not one P x V matmul")
    ops += [*vrep, pvv]
    layer = KVLayer(i, q, k_new, v_new, pvv, scale, heads, info["kv_heads"], S, T, D, cache_vars=(keys, values))
    layer.softcap, layer.window = softcap, window
    layer.ops = [(v.name, op_name(g.value[v])) for v in [keys, values, *ops]]
    return layer


def find_layers(func: relax.Function, info: dict, cfg: NPUConfig, log: list) -> list | None:
    """Every layer's resident attention in a step model's `main`, or None (each refusal appended to `log`
    as a Rejection) when any layer cannot keep its cache on the NPU.

    `info` is the step metadata (layers, kv_heads, head_dim, max_context, seq_len); `main`'s parameters
    are input_ids, position, then key and value per layer (llm/steps.py checked them)."""
    try:
        g = Graph(func)
    except ValueError as err:
        _reject(log, None, constraint_kv_attention, str(err))
        return None
    position = g.params[1]
    out = func.body.body
    result = g.value.get(out) if isinstance(out, relax.Var) else out
    result = result if isinstance(result, relax.Tuple) and len(result.fields) == 1 + 2 * info["layers"] else None
    layers = []
    for i in range(info["layers"]):
        try:
            layer = _match_layer(g, i, info, position, result)
        except _NoMatch as err:
            _reject(log, err.var, err.constraint, f"layer {i}: {err.detail}")
            return None
        why = constraint_kv_fits(layer, cfg)
        if why:
            _reject(log, layer.out, constraint_kv_fits, f"layer {i}: {why}")
            return None
        layers.append(layer)
    return layers
