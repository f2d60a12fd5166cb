"""The command stream of one layer's resident attention (docs/npu.md section 3, "State and the run-time
position"; partition/kv_cache_check.py recognises it).

Inputs q [1, H, S, D], k_new and v_new [1, H_kv, S, D] (float32 on the host, fp16 rows in DDR), the
position (the register, never staged); output [1, H, S, D]; the layer's keys and values in two state
slots [1, H_kv, T, D] of fp16 rows. Per KV head h, with its g = H / H_kv query heads:

    DMA_LOAD  q rows of heads [h g, (h + 1) g), k_new and v_new rows of head h
    DMA_STORE the S new key / value rows at cache row p          (pos_mode 1: ddr_addr + p * stride)
    DMA_LOAD  cache rows [0, p + S) of keys and values            (pos_mode 2: rows + p)
    MATMUL    Q x K^T, n = S + p (pos_mode 1); SOFTMAX causal (pos_mode 1), the scores' factor as its
              scale; MATMUL P x V, k = S + p (pos_mode 2)
    DMA_STORE the g * S output rows

Every command waits for every engine (the heads reuse one set of SRAM buffers): the attention of a
decode step is small next to its weights, and a plan without overlap has no hazard to get wrong. Decode
cost and DDR bytes grow with the position by the cache rows read, as docs/npu.md section 5 counts them.
"""

from __future__ import annotations

from ...contract.config import NPUConfig
from ...contract.errors import NPUError
from ...contract.stream import ENGINES, Command, Stream, TensorDesc, check_state_fits, f32_bits

_SYNC = dict.fromkeys(ENGINES, 0)  # wait until every engine is idle


def _line(elems: int, cfg: NPUConfig) -> int:
    return -(-elems * 2 // cfg.alignment) * cfg.alignment  # an fp16 row, aligned


def plan_kv_attention(cfg: NPUConfig, layer, slots: tuple, state_space: int) -> Stream:
    """The stream of `layer` (a partition.kv_cache_check.KVLayer) whose keys and values are the state
    slots `slots` = (keys, values) of `state_space`.

    Raises NPUError ERR_SRAM_OVERFLOW when one KV head's buffers exceed SRAM (the partition's
    constraint_kv_fits refuses those first) and ERR_MEMORY_OVERFLOW when the state region passes the
    32-bit DDR addresses."""
    H, H_kv, S, T, D = layer.heads, layer.kv_heads, layer.seq, layer.max_context, layer.head_dim
    g = H // H_kv
    rs, sst = _line(D, cfg), _line(T, cfg)
    name = f"layer {layer.layer} attention"
    # SRAM: one KV head's buffers.
    sram, at = {}, 0
    for key, size in (("q", g * S * rs), ("k", S * rs), ("v", S * rs), ("kc", T * rs), ("vc", T * rs)):
        sram[key], at = at, at + size
    for key, size in (("s", g * S * sst), ("p", g * S * sst), ("o", g * S * rs)):
        sram[key], at = at, at + size
    if at > cfg.sram_bytes:
        raise NPUError("ERR_SRAM_OVERFLOW", f"{name}: one KV head needs {at} bytes of SRAM > {cfg.sram_bytes}")
    # DDR: the staged inputs and the output, then the state region (keys, then values).
    dq = 0
    dk = dq + H * S * rs
    dv = dk + H_kv * S * rs
    do = dv + H_kv * S * rs
    ddr = do + H * S * rs
    state_bytes = 2 * H_kv * T * rs
    check_state_fits(ddr, state_bytes, f"the KV cache of layer {layer.layer} ({H_kv} heads x {T} rows x {D})")
    ck, cv = ddr, ddr + H_kv * T * rs

    def io(role, index, heads, addr):
        return TensorDesc(role, index, "float16", "float32", "ROWS", (1, heads, S, D), (1, heads * S, 1, D), addr, rs)

    def state(slot, addr):
        return TensorDesc("state", slot, "float16", "float16", "ROWS", (1, H_kv, T, D), (1, H_kv * T, 1, D), addr, rs)

    tensors = [
        io("input", 0, H, dq),
        io("input", 1, H_kv, dk),
        io("input", 2, H_kv, dv),
        TensorDesc("position", 3, "int32", "int64", "ROWS", (1,), (1, 1, 1, 1), 0, 0),
        io("output", 0, H, do),
        state(slots[0], ck),
        state(slots[1], cv),
    ]

    def dma(op, ddr_addr, sram_addr, rows, pos_mode=0, note=""):
        args = dict(channel=0, ddr_addr=ddr_addr, sram_addr=sram_addr, rows=rows, row_bytes=D * 2)
        args.update(ddr_stride=rs, sram_stride=rs, pos_mode=pos_mode)
        return Command(op, args, dict(_SYNC), note)

    cmds = []
    mm = dict(dtype=1, batch=g, b_group=g, m=S)
    for h in range(H_kv):
        note = f"{name} head {h}"
        cmds += [
            dma("DMA_LOAD", dq + h * g * S * rs, sram["q"], g * S, note=note),
            dma("DMA_LOAD", dk + h * S * rs, sram["k"], S, note=note),
            dma("DMA_LOAD", dv + h * S * rs, sram["v"], S, note=note),
            dma("DMA_STORE", ck + h * T * rs, sram["k"], S, pos_mode=1, note=note),
            dma("DMA_STORE", cv + h * T * rs, sram["v"], S, pos_mode=1, note=note),
            dma("DMA_LOAD", ck + h * T * rs, sram["kc"], S, pos_mode=2, note=note),
            dma("DMA_LOAD", cv + h * T * rs, sram["vc"], S, pos_mode=2, note=note),
        ]
        qk = dict(mm, k=D, n=S, b_transposed=1, a_addr=sram["q"], a_stride=rs, a_bstride=S * rs)
        qk.update(b_addr=sram["kc"], b_stride=rs, b_bstride=T * rs)
        qk.update(out_addr=sram["s"], out_stride=sst, out_bstride=S * sst, pos_mode=1)
        sm = dict(dtype=1, in_addr=sram["s"], in_stride=sst, out_addr=sram["p"], out_stride=sst, rows=g * S)
        sm.update(row_elems=S, scale=f32_bits(layer.scale) if layer.scale != 1.0 else 0, pos_mode=1)
        pv = dict(mm, k=S, n=D, b_transposed=0, a_addr=sram["p"], a_stride=sst, a_bstride=S * sst)
        pv.update(b_addr=sram["vc"], b_stride=rs, b_bstride=T * rs)
        pv.update(out_addr=sram["o"], out_stride=rs, out_bstride=S * rs, pos_mode=2)
        cmds += [
            Command("MATMUL", qk, dict(_SYNC), note),
            Command("SOFTMAX", sm, dict(_SYNC), note),
            Command("MATMUL", pv, dict(_SYNC), note),
            dma("DMA_STORE", do + h * g * S * rs, sram["o"], g * S, note=note),
        ]
    cmds.append(Command("END", {}, dict(_SYNC)))
    info = {"position_limit": T - S, "kv_state_bytes": state_bytes, "kv_slots": list(slots)}
    return Stream(cfg, tensors, cmds, b"", ddr, at, info=info, state_bytes=state_bytes, state_space=state_space)
