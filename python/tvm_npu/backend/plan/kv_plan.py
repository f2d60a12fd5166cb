"""The command stream of one layer's resident attention (docs/npu.md section 3, "State and the run-time
position"; partition/kv_cache_check.py recognises it).

Inputs q [1, H, S, D], k_new and v_new [1, H_kv, S, D] (float32 on the host, fp16 rows in DDR), the
position (the register, never staged); output [1, H, S, D]; the layer's keys and values in two state
slots [1, H_kv, T, D] of fp16 rows. Per KV head h, with its g = H / H_kv query heads:

    DMA_LOAD  q rows of heads [h g, (h + 1) g), k_new and v_new rows of head h
    DMA_STORE the S new key / value rows at cache row p          (pos_mode 1: ddr_addr + p * stride)
    DMA_LOAD  cache rows [0, p + S) of keys and values            (pos_mode 2: rows + p)
    MATMUL    Q x K^T, n = S + p (pos_mode 1); SOFTMAX causal (pos_mode 1), the scores' factor as its
              scale (a sliding window's W as its window, format 1.6); MATMUL P x V, k = S + p (pos_mode 2)
    DMA_STORE the g * S output rows

An attention softcap tanh(scale * s / cap) * cap (layer.softcap = cap, Gemma2's) adds, between the two
MATMULs, ELTWISE multiply by the scalar fp16(scale / cap) (one aligned row of the weight region, loaded
once) and UNARY tanh, both over all T columns of the g * S score rows (neither has a position-limited
form: the columns past p + S hold what SRAM held, and the causal SOFTMAX never reads them), then the
SOFTMAX with cap as its scale: fp16(cap * fp16(tanh(fp16(fp16(s) * fp16(scale / cap))))) in fp32 is z.

An int8 cache (`kv_scales`, docs/npu.md section 2, "The int8 KV cache") has int8 state rows and one fp32
scale per KV head for K and one for V: each head's new rows are an input of their own (k_new head 0 ..
H_kv - 1, then v_new's), quantized by the runtime's staging with the head's scale; the scales are the
weight region (one per 128-byte row: an aligned scale table of one B batch per MATMUL), loaded once, and
both MATMULs read the cache as an int8 B with the head's scale (b_dtype int8).

An SRAM cache (`sram_area`, docs/npu.md section 3, "The SRAM state area"; format 1.5) keeps every
layer's keys and values in the top `sram_area` bytes of SRAM, layer i's at offset i * 2 * H_kv * T * row:
the new rows go from DDR straight into the cache at row p (DMA_LOAD, pos_mode 4: sram_addr + p *
stride) and both MATMULs read the cache where it lies, so no cache row crosses DDR; the step's scratch
stays below the area.

Every command waits for every engine (the heads reuse one set of SRAM buffers): the attention of a
decode step is small next to its weights, and a plan without overlap has no hazard to get wrong. Decode
cost and DDR bytes grow with the position by the cache rows read, as docs/npu.md section 5 counts them.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from ...contract.config import NPUConfig
from ...contract.errors import NPUError
from ...contract.stream import (
    B_MODES,
    DTYPES,
    ELTWISE_KINDS,
    ENGINES,
    NO_TABLE,
    UNARY_FUNCS,
    Command,
    Stream,
    TensorDesc,
    check_state_fits,
    f32_bits,
)

_SYNC = dict.fromkeys(ENGINES, 0)  # wait until every engine is idle


def _line(elems: int, cfg: NPUConfig) -> int:
    return -(-elems * 2 // cfg.alignment) * cfg.alignment  # an fp16 row, aligned


def cache_row_bytes(cfg: NPUConfig, head_dim: int, int8: bool) -> int:
    """One cache row (a KV head's D elements at one position), aligned: the cache's unit of memory."""
    return -(-head_dim * (1 if int8 else 2) // cfg.alignment) * cfg.alignment


def scratch_bytes(cfg: NPUConfig, layer, int8: bool, sram_cache: bool) -> int:
    """SRAM one KV head's buffers take (what plan_kv_attention places below an SRAM cache)."""
    return _scratch(cfg, layer, int8, sram_cache)[1]


def _scratch(cfg: NPUConfig, layer, int8: bool, sram_cache: bool) -> tuple[dict, int]:
    H, H_kv, S, T, D = layer.heads, layer.kv_heads, layer.seq, layer.max_context, layer.head_dim
    g = H // H_kv
    rs, sst, rc = _line(D, cfg), _line(T, cfg), cache_row_bytes(cfg, D, int8)
    # An SRAM cache needs no staging of the new rows or of the cache rows: they go to / are read in place.
    own = () if sram_cache else (("k", S * rc), ("v", S * rc), ("kc", T * rc), ("vc", T * rc))
    scales = 2 * H_kv * cfg.alignment if int8 else 0
    cap = cfg.alignment if layer.softcap else 0  # the softcap's fp16 factor
    sram, at = {}, 0
    for key, size in (("q", g * S * rs), *own, ("sc", scales), ("cap", cap)):
        sram[key], at = at, at + size
    for key, size in (("s", g * S * sst), ("p", g * S * sst), ("o", g * S * rs)):
        sram[key], at = at, at + size
    return sram, at


def plan_kv_attention(
    cfg: NPUConfig, layer, slots: tuple, state_space: int, kv_scales=None, sram_area: int = 0
) -> Stream:
    """The stream of `layer` (a partition.kv_cache_check.KVLayer) whose keys and values are the state
    slots `slots` = (keys, values) of `state_space`; `kv_scales` None (an fp16 cache) or the int8 cache's
    (K scales [H_kv], V scales [H_kv]), fp32; `sram_area` 0 (the cache in the DDR state region) or the
    bytes of the SRAM state area holding every layer's cache (layer i's at i * 2 * H_kv * T * row).

    Raises NPUError ERR_SRAM_OVERFLOW when one KV head's buffers exceed SRAM (below the SRAM state area
    when there is one; the partition's constraint_kv_fits refuses those first) and ERR_MEMORY_OVERFLOW
    when the state region passes the 32-bit DDR addresses."""
    H, H_kv, S, T, D = layer.heads, layer.kv_heads, layer.seq, layer.max_context, layer.head_dim
    g = H // H_kv
    rs, sst = _line(D, cfg), _line(T, cfg)
    i8 = kv_scales is not None
    el = 1 if i8 else 2  # the cache's element bytes
    rc = cache_row_bytes(cfg, D, i8)  # a cache row (and a new K / V row), aligned
    name = f"layer {layer.layer} attention"
    weights = _scale_rows(kv_scales, cfg) if i8 else b""
    cap_at = len(weights)  # the softcap's factor row follows the int8 cache's scales
    weights += _cap_row(layer, cfg) if layer.softcap else b""
    # SRAM: one KV head's buffers (and the int8 cache's scales), below the SRAM state area.
    sram, at = _scratch(cfg, layer, i8, bool(sram_area))
    if at + sram_area > cfg.sram_bytes:
        raise NPUError(
            "ERR_SRAM_OVERFLOW",
            f"{name}: one KV head needs {at} bytes of SRAM, {cfg.sram_bytes - sram_area} are available"
            + (f" next to the SRAM KV cache of {sram_area} bytes: use kv_placement='ddr'" if sram_area else ""),
        )
    # DDR: the staged inputs and the output, then the state region (keys, then values).
    dq = len(weights)  # the activation region follows the weight region (int8 scales, softcap factor)
    dk = dq + H * S * rs
    dv = dk + H_kv * S * rc
    do = dv + H_kv * S * rc
    ddr = do + H * S * rs
    state_bytes = 0 if sram_area else 2 * H_kv * T * rc
    check_state_fits(ddr, state_bytes, f"the KV cache of layer {layer.layer} ({H_kv} heads x {T} rows x {D})")
    # The DDR state region follows the activations; an SRAM cache is layer i's share of the area.
    ck = cfg.sram_bytes - sram_area + layer.layer * 2 * H_kv * T * rc if sram_area else ddr
    cv = ck + H_kv * T * rc
    tensors = _tensors(layer, slots, i8, kv_scales, (dq, dk, dv, do, ck, cv), rs, rc, bool(sram_area))
    if len(tensors) > cfg.max_tensors:  # an int8 cache has 2 * H_kv + 5 descriptors
        raise NPUError(
            "ERR_TASK_TOO_COMPLEX",
            f"{name}: an int8 KV cache of {H_kv} KV heads needs {len(tensors)} tensors, the NPU takes "
            f"{cfg.max_tensors} per task: use kv_dtype='float16'",
        )

    def dma(op, ddr_addr, sram_addr, rows, pos_mode=0, note="", row_bytes=D * el, stride=rc):
        args = dict(channel=0, ddr_addr=ddr_addr, sram_addr=sram_addr, rows=rows, row_bytes=row_bytes)
        args.update(ddr_stride=stride, sram_stride=stride, pos_mode=pos_mode)
        return Command(op, args, dict(_SYNC), note)

    cmds = [dma("DMA_LOAD", 0, sram["sc"], 2 * H_kv, row_bytes=4, stride=cfg.alignment)] if i8 else []
    if layer.softcap:
        cmds.append(dma("DMA_LOAD", cap_at, sram["cap"], 1, row_bytes=2, stride=cfg.alignment))
    mm = dict(dtype=1, batch=g, b_group=g, m=S)
    for h in range(H_kv):
        note = f"{name} head {h}"
        cmds.append(dma("DMA_LOAD", dq + h * g * S * rs, sram["q"], g * S, note=note, row_bytes=D * 2, stride=rs))
        if sram_area:  # the new rows straight into the SRAM cache at row p; the MATMULs read it in place
            sram["kc"], sram["vc"] = ck + h * T * rc, cv + h * T * rc
            cmds += [
                dma("DMA_LOAD", dk + h * S * rc, sram["kc"], S, pos_mode=4, note=note),
                dma("DMA_LOAD", dv + h * S * rc, sram["vc"], S, pos_mode=4, note=note),
            ]
        else:
            cmds += [
                dma("DMA_LOAD", dk + h * S * rc, sram["k"], S, note=note),
                dma("DMA_LOAD", dv + h * S * rc, sram["v"], S, note=note),
                dma("DMA_STORE", ck + h * T * rc, sram["k"], S, pos_mode=1, note=note),
                dma("DMA_STORE", cv + h * T * rc, sram["v"], S, pos_mode=1, note=note),
                dma("DMA_LOAD", ck + h * T * rc, sram["kc"], S, pos_mode=2, note=note),
                dma("DMA_LOAD", cv + h * T * rc, sram["vc"], S, pos_mode=2, note=note),
            ]
        k8 = dict(b_dtype=2, b_scale_addr=sram["sc"] + h * cfg.alignment) if i8 else {}
        v8 = dict(b_dtype=2, b_scale_addr=sram["sc"] + (H_kv + h) * cfg.alignment) if i8 else {}
        qk = dict(mm, k=D, n=S, b_transposed=1, a_addr=sram["q"], a_stride=rs, a_bstride=S * rs)
        qk.update(b_addr=sram["kc"], b_stride=rc, b_bstride=T * rc, **k8)
        qk.update(out_addr=sram["s"], out_stride=sst, out_bstride=S * sst, pos_mode=1)
        factor = layer.softcap or layer.scale  # with a softcap, the scale is in the ELTWISE before the tanh
        sm = dict(dtype=1, in_addr=sram["s"], in_stride=sst, out_addr=sram["p"], out_stride=sst, rows=g * S)
        sm.update(row_elems=S, scale=f32_bits(factor) if factor != 1.0 else 0, pos_mode=1, window=layer.window)
        pv = dict(mm, k=S, n=D, b_transposed=0, a_addr=sram["p"], a_stride=sst, a_bstride=S * sst)
        pv.update(b_addr=sram["vc"], b_stride=rc, b_bstride=T * rc, **v8)
        pv.update(out_addr=sram["o"], out_stride=rs, out_bstride=S * rs, pos_mode=2)
        cmds += [
            Command("MATMUL", qk, dict(_SYNC), note),
            *(_softcap_commands(sram, g * S, T, sst, cfg, note) if layer.softcap else []),
            Command("SOFTMAX", sm, dict(_SYNC), note),
            Command("MATMUL", pv, dict(_SYNC), note),
            dma("DMA_STORE", do + h * g * S * rs, sram["o"], g * S, note=note, row_bytes=D * 2, stride=rs),
        ]
    cmds.append(Command("END", {}, dict(_SYNC)))
    info = {"position_limit": T - S, "kv_state_bytes": 2 * H_kv * T * rc, "kv_slots": list(slots)}
    info["kv_placement"] = "sram" if sram_area else "ddr"
    return Stream(
        cfg,
        tensors,
        cmds,
        weights,
        ddr,
        at,
        info=info,
        state_bytes=state_bytes,
        state_space=state_space,
        sram_state_bytes=sram_area,
    )


def _softcap_commands(sram: dict, rows: int, T: int, sst: int, cfg: NPUConfig, note: str) -> list:
    """ELTWISE scores x fp16(scale / cap) into the probabilities' buffer, then UNARY tanh back into the
    scores' (an output may not overlap its input): `rows` rows of all T columns, as SOFTMAX reads them."""
    span = dict(dtype=DTYPES["float16"], rows=rows, row_elems=T)
    mul = dict(span, kind=ELTWISE_KINDS["multiply"], b_mode=B_MODES["scalar"], channels=0, act=0)
    mul.update(a_addr=sram["s"], a_stride=sst, b_addr=sram["cap"], b_stride=cfg.alignment)
    mul.update(out_addr=sram["p"], out_stride=sst, clip_lo=0, clip_hi=0)
    tanh = dict(span, func=UNARY_FUNCS["tanh"], in_addr=sram["p"], in_stride=sst, out_addr=sram["s"])
    tanh.update(out_stride=sst, table_addr=NO_TABLE, alpha=0)
    return [Command("ELTWISE", mul, dict(_SYNC), note), Command("UNARY", tanh, dict(_SYNC), note)]


def _cap_row(layer, cfg: NPUConfig) -> bytes:
    """The softcap's ELTWISE factor scale / cap as one fp16 scalar at the start of an aligned row (the
    recognizer refused a factor fp16 cannot hold as a normal number)."""
    f = np.float16(layer.scale / layer.softcap)
    if not (np.isfinite(f) and abs(float(f)) >= 2.0**-14):
        raise NPUError("ERR_INVALID_CONFIG", f"the softcap factor {layer.scale / layer.softcap:g} is no fp16 normal")
    return f.tobytes().ljust(cfg.alignment, b"\0")


def _scale_rows(kv_scales, cfg: NPUConfig) -> bytes:
    """The int8 cache's scales as the weight region: K's of heads 0.. H_kv - 1, then V's, one fp32 word at
    the start of each aligned row (a MATMUL's scale table of one B batch starts aligned)."""
    rows = [float(s) for s in kv_scales[0]] + [float(s) for s in kv_scales[1]]
    bad = [s for s in rows if not (math.isfinite(s) and s > 0)]
    if bad:
        raise NPUError("ERR_INVALID_CONFIG", f"int8 KV cache scales must be finite and > 0, not {bad[0]}")
    return b"".join(struct.pack("<f", s).ljust(cfg.alignment, b"\0") for s in rows)


def _tensors(layer, slots, i8: bool, kv_scales, addrs: tuple, rs: int, rc: int, in_sram: bool) -> list:
    """The region's descriptors: q, k_new and v_new (an int8 cache: one quantized input per KV head and
    each of K and V), the position, the output, the two state slots (role sram_state, at SRAM
    addresses, for an SRAM cache)."""
    H, H_kv, S, T, D = layer.heads, layer.kv_heads, layer.seq, layer.max_context, layer.head_dim
    dq, dk, dv, do, ck, cv = addrs
    cache = "int8" if i8 else "float16"

    def io(role, index, heads, addr):
        return TensorDesc(role, index, "float16", "float32", "ROWS", (1, heads, S, D), (1, heads * S, 1, D), addr, rs)

    def state(slot, addr):
        role = "sram_state" if in_sram else "state"
        return TensorDesc(role, slot, cache, cache, "ROWS", (1, H_kv, T, D), (1, H_kv * T, 1, D), addr, rc)

    if i8:  # head h's new rows, quantized by the staging with its scale (zero point 0)
        new = [
            TensorDesc(
                "input",
                1 + j * H_kv + h,
                "int8",
                "float32",
                "ROWS",
                (1, 1, S, D),
                (1, S, 1, D),
                base + h * S * rc,
                rc,
                float(kv_scales[j][h]),
                0,
            )
            for j, base in enumerate((dk, dv))
            for h in range(H_kv)
        ]
    else:
        new = [io("input", 1, H_kv, dk), io("input", 2, H_kv, dv)]
    n_in = 1 + len(new)
    return [
        io("input", 0, H, dq),
        *new,
        TensorDesc("position", n_in, "int32", "int64", "ROWS", (1,), (1, 1, 1, 1), 0, 0),
        io("output", 0, H, do),
        state(slots[0], ck),
        state(slots[1], cv),
    ]
