"""Stage 2a (LLM step models only) — the KV cache resident on the NPU (docs/llm.md, "The cache on the NPU").

For a step model compiled with `kv_cache=` (tvm_npu.llm does), each layer's cache write and attention
(partition/kv_cache_check.py recognises them) becomes one NPU region whose keys and values are two state
slots (2i, 2i + 1) of a shared state space, and `main` becomes the *resident variant* of the step:

    main(input_ids, position) -> (logits,)

The cache parameters and the `cache_out.*` outputs are gone: the state region is the cache, kept by the
runtime between calls and shared by every module of the state space (prefill and decode). The region is
planned, verified and encoded here (backend/plan/kv_plan.py), and `main` calls its runtime module
directly (`call_dps_packed` of its symbol; the module goes to the IRModule's `external_mods`, as
RunCodegen's do), before the rest of the model is partitioned as usual. A model whose attention does not
match in every layer keeps its signature and its host-held cache; the rejections say why.

Where the cache lives (`kv_placement`, docs/llm.md "Where the cache lives"): the DDR state region, or,
when the whole cache fits next to what the steps need, the SRAM state area (the top of SRAM kept across
calls, docs/npu.md section 3), so a decode step reads no cache row from DDR. The decision is made once
per LLM (placement()), so prefill and decode agree; with an SRAM cache every other region of the step
is planned for the SRAM below the area (BuildContext.sram_reserved).

Unlike an ordinary region, a resident one cannot fall back to the CPU (the CPU has no cache once the
signature has dropped it): any failure to plan it is raised, coded, before `main` is rewritten.
"""

from __future__ import annotations

from types import SimpleNamespace

import tvm
from tvm import relax

from .. import runtime
from ..contract import stream
from ..contract.config import NPUConfig
from ..contract.errors import NPUError
from ..ir.graph import BLOCK_BUILDER_LOCK, Graph, free_vars, subst
from ..partition.kv_cache_check import find_layers, kv_sram_bytes
from ..partition.report import Placement, op_macs
from .plan.kv_plan import cache_row_bytes, plan_kv_attention
from .verify import verify

PLACEMENTS = ("auto", "ddr", "sram")
DDR_ADDRESS_SPACE = 1 << 32  # what stream.check_state_fits allows: the NPU's DDR addresses are 32 bits


def cache_bytes(cfg: NPUConfig, step: dict, int8: bool) -> int:
    """The whole resident cache: every layer's K and V, max_context aligned rows per KV head."""
    row = cache_row_bytes(cfg, step["head_dim"], int8)
    return 2 * step["layers"] * step["kv_heads"] * step["max_context"] * row


def placement(cfg: NPUConfig, step: dict, int8: bool, wanted: str) -> tuple[str, int]:
    """(where the cache lives, "sram" or "ddr"; the SRAM state area's bytes, 0 for "ddr").

    "auto" takes SRAM when the cache is at most half of it: the other half stays for the weight tiles
    of the dense layers (a decode step streams its weights once, so halving their tiles costs a few
    DMA latencies, while a cache read from DDR costs its bytes at every step). "sram" takes it whenever
    it fits, and is ERR_SRAM_OVERFLOW naming the bytes when it does not; "ddr" never."""
    if wanted not in PLACEMENTS:
        raise NPUError("ERR_INVALID_CONFIG", f"kv_placement={wanted!r}: use one of {PLACEMENTS}")
    need = cache_bytes(cfg, step, int8)
    if wanted == "sram" and need >= cfg.sram_bytes:
        raise NPUError(
            "ERR_SRAM_OVERFLOW",
            f"the KV cache ({step['layers']} layers x 2 x {step['kv_heads']} heads x {step['max_context']} rows) "
            f"needs {need} bytes of SRAM, {cfg.sram_bytes} are available (and the steps need some): use "
            "kv_placement='ddr' or 'auto', or a smaller max_context",
        )
    if wanted == "sram" or (wanted == "auto" and 2 * need <= cfg.sram_bytes):
        return "sram", need
    return "ddr", 0


def check_fits(cfg: NPUConfig, infos: list, int8: bool, wanted: str) -> None:
    """The compile-time out-of-memory errors of a resident cache that fits nowhere, from the step metadata
    alone (`infos`: the prefill's and the decode's), so that llm.compile raises them before anything of
    max_context's size is allocated (calibration caches, a host-held cache, the build).

    ERR_MEMORY_OVERFLOW: the whole cache (cache_bytes) passes the 2^32 bytes the NPU's DDR addresses reach,
    with any placement (the resident build refuses it too: make_resident). ERR_SRAM_OVERFLOW, with
    kv_placement "ddr" or "sram" only: one KV head's attention reads all T of its key and value rows into
    SRAM (partition.kv_cache_check.kv_sram_bytes, at its least: one query head per KV head), and that does
    not fit. "auto" then keeps the documented host-held cache (docs/llm.md, "All layers or none")."""
    step = infos[-1]
    L, H_kv, T, D = (step[k] for k in ("layers", "kv_heads", "max_context", "head_dim"))
    need = cache_bytes(cfg, step, int8)
    limit = DDR_ADDRESS_SPACE
    if need > limit:
        rows = limit // (need // T)
        raise NPUError(
            "ERR_MEMORY_OVERFLOW",
            f"the KV cache ({L} layers x 2 x {H_kv} heads x {T} rows x {need // T // (2 * L * H_kv)} B) needs "
            f"{need} bytes, the NPU's 32-bit DDR addresses reach {limit} (no configuration has more): "
            f"compile with max_context <= {rows}"
            + ("" if int8 else f", or kv_dtype='int8' ({cache_bytes(cfg, step, True)} bytes at this max_context)"),
        )
    if wanted == "auto":
        return
    for info in infos:
        head = SimpleNamespace(heads=H_kv, kv_heads=H_kv, seq=info["seq_len"], max_context=T, head_dim=D, softcap=0)
        least = kv_sram_bytes(head, cfg)
        if least <= cfg.sram_bytes:
            continue
        fits = _largest_fitting(head, cfg)
        raise NPUError(
            "ERR_SRAM_OVERFLOW",
            f"kv_placement={wanted!r}: the KV cache of max_context {T} fits no memory the NPU can run its "
            f"attention from: one KV head reads its {T} key and value rows into SRAM with its queries and "
            f"scores ({info['seq_len']} rows), at least {least} bytes, {cfg.sram_bytes} are available: compile "
            f"with a smaller max_context (at most {fits}), a configuration with more "
            "SRAM, or kv_cache='host' (the host holds the cache)",
        )


def _largest_fitting(head: SimpleNamespace, cfg: NPUConfig) -> int:
    """The largest max_context whose head attention fits SRAM (kv_sram_bytes grows with T; bisection),
    0 when not even max_context = seq fits."""
    low, high = head.seq - 1, head.max_context  # need(low) fits (or low is seq - 1), need(high) does not
    while high - low > 1:
        mid = (low + high) // 2
        fits = kv_sram_bytes(SimpleNamespace(**dict(vars(head), max_context=mid)), cfg) <= cfg.sram_bytes
        low, high = (mid, high) if fits else (low, mid)
    return low if low >= head.seq else 0


def _live(g: Graph, roots: list, replaced: dict) -> set:
    """The bindings `roots` need, reading a replaced binding's region inputs instead of its own."""
    need, todo = set(), list(roots)
    while todo:
        v = todo.pop()
        if v in need or v not in g.value:
            continue
        need.add(v)
        todo.extend(replaced[v] if v in replaced else free_vars(g.value[v]))
    return need


def make_resident(
    mod: tvm.IRModule, cfg: NPUConfig, step: dict, state_space: int, log: list, kv_scales=None, sram_area: int = 0
) -> tuple:
    """(the resident variant of `mod`, {symbol: (planned stream, placements)}), or (`mod`, {}) when a
    layer is refused (the Rejections appended to `log`).

    `step` is the step metadata (docs/llm.md); `state_space` the non-zero space the prefill and decode
    steps of one LLM share; `kv_scales` None (an fp16 cache) or an int8 cache's fp32 scales [L][2][H_kv]
    (layer, K / V, KV head): each layer's new K and V rows then reach its region split by KV head, the
    runtime quantizing each with its head's scale (backend/plan/kv_plan.py); `sram_area` 0 (the cache
    in the DDR state region) or the SRAM state area's bytes (placement())."""
    # The whole cache (every layer's slots, one state space) against the 32-bit DDR addresses first: a
    # max_context that cannot fit is a compile-time error naming the bytes, not a quiet host fallback.
    L, H_kv, T, D = (step[k] for k in ("layers", "kv_heads", "max_context", "head_dim"))
    row = -(-D * (1 if kv_scales is not None else 2) // cfg.alignment) * cfg.alignment
    stream.check_state_fits(
        0, 2 * L * H_kv * T * row, f"the KV cache ({L} layers x 2 x {H_kv} heads x {T} rows x {row} B)"
    )
    main = mod["main"]
    layers = find_layers(main, step, cfg, log)
    if layers is None:
        return mod, {}
    g = Graph(main)
    position = g.params[1]
    regions, replaced, calls = {}, {}, {}
    for layer in layers:
        symbol = f"tvm_npu_kv_attention_{layer.layer}"
        scales = None if kv_scales is None else kv_scales[layer.layer]
        slots = (2 * layer.layer, 2 * layer.layer + 1)
        planned = plan_kv_attention(cfg, layer, slots, state_space, scales, sram_area)
        verify(planned)  # a planner bug is a compile-time error here, never a wrong cache
        regions[symbol] = (planned, stream.encode(planned), layer)
        replaced[layer.out] = [layer.q, layer.k_new, layer.v_new, position]
        calls[layer.out] = symbol
    out = main.body.body
    logits = (g.value[out] if isinstance(out, relax.Var) and out in g.value else out).fields[0]
    need = _live(g, [logits], replaced)

    bb = relax.BlockBuilder()
    stand_ins = {}
    for layer in layers:
        symbol = calls[layer.out]
        args = [relax.Var(f"x{j}", sinfo) for j, sinfo in enumerate(_arg_infos(replaced[layer.out], kv_scales))]
        body = relax.op.zeros(layer.out.ty.shape, "float32")
        stand_ins[symbol] = bb.add_func(
            relax.Function(args, body, layer.out.ty).with_attr("global_symbol", symbol), symbol
        )
    params = [relax.Var(p.name, p.ty) for p in g.params[:2]]
    m = dict(zip(g.params[:2], params))
    attrs = dict(main.attrs) if main.attrs else {}
    attrs["num_input"] = 2
    with BLOCK_BUILDER_LOCK, bb.function("main", params, attrs=attrs):
        with bb.dataflow():
            for v, e in g.bindings:
                if v not in need:
                    continue
                if v in calls:  # a stand-in until the partition is done (see `link`)
                    e = relax.Call(stand_ins[calls[v]], _region_args(bb, [m[x] for x in replaced[v]], kv_scales))
                else:
                    e = subst(e, m)
                m[v] = bb.emit(e, name_hint=v.name)
            result = bb.emit_output(relax.Tuple([m[logits]]))
        bb.emit_func_output(result)
    built = bb.get()
    ext = list(mod.attrs["external_mods"]) if mod.attrs is not None and "external_mods" in mod.attrs else []
    ext += [runtime.create_module(symbol, blob) for symbol, (_, blob, _) in regions.items()]
    funcs = {gv: f for gv, f in mod.functions.items() if gv.name_hint != "main"}
    funcs.update(dict(built.functions.items()))
    new = tvm.IRModule(funcs, attrs=mod.attrs).with_attr("external_mods", ext)
    done, call_of = {}, {v.name: e for v, e in g.bindings}
    for symbol, (planned, _, layer) in regions.items():
        # MACs from the Relax shapes, as for any op: the attention over all T rows, the bound a step
        # reaches at the last position (the runtime's profile has a call's own).
        rows = [
            Placement(var, op, "npu", symbol, "npu.kv_attention", precision="fp16", macs=op_macs(call_of[var]))
            for var, op in layer.ops
        ]
        done[symbol] = (planned, rows, layer.out.name)
    return new, done


def _arg_infos(args: list, kv_scales) -> list:
    """The struct infos of a region's arguments: q, k_new, v_new, position; with an int8 cache k_new and
    v_new [1, H_kv, S, D] become H_kv arguments [1, 1, S, D] each."""
    q, k, v, pos = (x.ty for x in args)
    if kv_scales is None:
        return [q, k, v, pos]
    shape = [int(d) for d in k.shape]
    head = relax.TensorType([shape[0], 1, *shape[2:]], k.dtype)
    return [q, *[head] * (2 * shape[1]), pos]


def _region_args(bb, args: list, kv_scales) -> list:
    """The call's arguments (see _arg_infos): with an int8 cache, k_new and v_new split by KV head on the
    CPU (each head is a region input of its own, quantized with its own scale by the runtime)."""
    if kv_scales is None:
        return args
    q, k, v, pos = args
    heads = int(k.ty.shape[1])
    parts = []
    for x in (k, v):
        if heads == 1:
            parts.append(x)
            continue
        split = bb.emit(relax.op.split(x, heads, axis=1))
        parts += [bb.emit(relax.TupleGetItem(split, h)) for h in range(heads)]
    return [q, *parts, pos]


def region_layers(planned) -> dict:
    """report.region_layers's summary of a resident attention region: one fp16 layer per KV head (its
    commands' note); MACs and bytes depend on the position, so the runtime's per-call profile has them."""
    notes = [c.note for c in planned.commands]
    empty = {"macs": 0, "vector_steps": 0, "weight_bytes": 0, "input_bytes": [], "output_bytes": 0}
    layers = [
        {
            "name": n,
            "composite": "npu.kv_attention",
            "kind": "matmul",
            "dtype": "float16",
            **empty,
            "region_io_bytes": 0,
        }
        for n in dict.fromkeys(n for n in notes if n)
    ]
    io = lambda role: [t.view[1] * t.row_stride for t in planned.tensors if t.role == role]  # noqa: E731
    return {"layers": layers, "input_bytes": io("input"), "output_bytes": io("output"), "command_layers": notes}


@relax.expr_functor.mutator
class _Link(relax.PyExprMutator):
    def __init__(self, mod, symbols):
        super().__init__(mod)
        self.symbols = symbols

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if isinstance(call.op, tvm.ir.GlobalVar) and call.op.name_hint in self.symbols:
            return relax.call_dps_packed(call.op.name_hint, relax.Tuple(list(call.args)), call.ty)
        return call


def link(mod: tvm.IRModule, symbols) -> tvm.IRModule:
    """`mod` with each stand-in call of a resident region (make_resident) turned into the call of its
    runtime module's symbol, and the stand-ins removed: after the partition, whose MergeCompositeFunctions
    takes no external function in `main`."""
    symbols = set(symbols)
    if not symbols:
        return mod
    main = _Link(mod, symbols).visit_expr(mod["main"])
    funcs = {
        gv: (main if gv.name_hint == "main" else f) for gv, f in mod.functions.items() if gv.name_hint not in symbols
    }
    return tvm.IRModule(funcs, attrs=mod.attrs)
