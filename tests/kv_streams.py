"""A hand-packed attention step over a KV cache at a run-time position (format 1.4, docs/npu.md section 3),
packed through the contract's layout by npu_stream_pack.py: for the runtime tests and the stream fuzzer."""

import numpy as np

from npu_stream_pack import (
    ALL_DONE,
    DMA_LOAD,
    DMA_STORE,
    END,
    FP16,
    FP32,
    INPUT,
    OUTPUT,
    ROWS,
    SOFTMAX,
    align,
    command,
    f32_bits,
    pack_stream,
    tensor,
)
from tvm_npu.contract import layout

MATMUL = layout.OPCODES["MATMUL"]
STATE, POSITION = (layout.codes("role")[n] for n in ("state", "position"))
INT32, INT64 = (layout.codes("dtype")[n] for n in ("int32", "int64"))
V13, V14 = (1, 3), (1, 4)


def dma(op, ddr, sram, rows, row_bytes, stride, pos_mode=0, channel=0):
    ops = dict(channel=channel, ddr_addr=ddr, sram_addr=sram, rows=rows, row_bytes=row_bytes)
    ops.update(ddr_stride=stride, sram_stride=stride, pos_mode=pos_mode)
    return command(op, ops, ALL_DONE)


def kv_stream(S, T_, D, H, H_kv, scale, space=0, version=V14, mutate=None):
    """The blob of one attention step: inputs q [H, S, D], k, v [H_kv, S, D], position; output [H, S, D];
    state slots 0 (keys) and 1 (values), [H_kv, T, D] fp16 each. `mutate(parts)` may change the parts
    (tensors, commands, header words) before packing, for the refusal tests."""
    rs, sst = align(D * 2), align(T_ * 2)
    sq, sk = 0, H * S * rs
    sv = sk + H_kv * S * rs
    skc = sv + H_kv * S * rs
    svc = skc + H_kv * T_ * rs
    ss = svc + H_kv * T_ * rs
    sp = ss + H * S * sst
    so = sp + H * S * sst
    dq = 128
    dk = dq + H * S * rs
    dv = dk + H_kv * S * rs
    do = dv + H_kv * S * rs
    ddr = do + H * S * rs
    ck, cv = ddr, ddr + H_kv * T_ * rs

    def io(role, index, rows_shape, addr):
        rows = int(np.prod(rows_shape[:-1]))
        return tensor(role, index, [1, rows, 1, D], addr, rs, FP16, FP32, ROWS, rows_shape)

    tensors = [
        io(INPUT, 0, (H, S, D), dq),
        io(INPUT, 1, (H_kv, S, D), dk),
        io(INPUT, 2, (H_kv, S, D), dv),
        tensor(POSITION, 3, [1, 1, 1, 1], 0, 0, INT32, INT64, ROWS, (1,)),
        io(OUTPUT, 0, (H, S, D), do),
        tensor(STATE, 0, [1, H_kv * T_, 1, D], ck, rs, FP16, FP16, ROWS, (H_kv, T_, D)),
        tensor(STATE, 1, [1, H_kv * T_, 1, D], cv, rs, FP16, FP16, ROWS, (H_kv, T_, D)),
    ]
    cmds = [
        dma(DMA_LOAD, dq, sq, H * S, D * 2, rs),
        dma(DMA_LOAD, dk, sk, H_kv * S, D * 2, rs),
        dma(DMA_LOAD, dv, sv, H_kv * S, D * 2, rs),
    ]
    for h in range(H_kv):  # the new rows written at the position (bit 0: address + p * stride)
        cmds.append(dma(DMA_STORE, ck + h * T_ * rs, sk + h * S * rs, S, D * 2, rs, pos_mode=1))
        cmds.append(dma(DMA_STORE, cv + h * T_ * rs, sv + h * S * rs, S, D * 2, rs, pos_mode=1))
    for h in range(H_kv):  # rows [0, p + S) read back (bit 1: rows + p)
        cmds.append(dma(DMA_LOAD, ck + h * T_ * rs, skc + h * T_ * rs, S, D * 2, rs, pos_mode=2))
        cmds.append(dma(DMA_LOAD, cv + h * T_ * rs, svc + h * T_ * rs, S, D * 2, rs, pos_mode=2))
    mm = dict(dtype=FP16, batch=H, b_group=H // H_kv, m=S)
    cmds.append(
        command(
            MATMUL,
            dict(mm, k=D, n=S, b_transposed=1, a_addr=sq, a_stride=rs, a_bstride=S * rs, b_addr=skc, b_stride=rs)
            | dict(b_bstride=T_ * rs, out_addr=ss, out_stride=sst, out_bstride=S * sst, pos_mode=1),
            ALL_DONE,
        )
    )
    sm = dict(dtype=FP16, in_addr=ss, in_stride=sst, out_addr=sp, out_stride=sst, rows=H * S, row_elems=S)
    cmds.append(command(SOFTMAX, sm | dict(scale=f32_bits(scale) if scale else 0, pos_mode=1), ALL_DONE))
    cmds.append(
        command(
            MATMUL,
            dict(mm, k=S, n=D, b_transposed=0, a_addr=sp, a_stride=sst, a_bstride=S * sst, b_addr=svc, b_stride=rs)
            | dict(b_bstride=T_ * rs, out_addr=so, out_stride=rs, out_bstride=S * rs, pos_mode=2),
            ALL_DONE,
        )
    )
    cmds.append(dma(DMA_STORE, do, so, H * S, D * 2, rs))
    cmds.append(command(END, [], ALL_DONE))
    parts = dict(tensors=tensors, cmds=cmds, state_bytes=2 * H_kv * T_ * rs, space=space, ddr=ddr, inputs=4)
    if mutate is not None:
        mutate(parts)
    return pack_stream(
        parts["tensors"],
        parts["cmds"],
        b"\0" * 128,
        parts["ddr"],
        parts["inputs"],
        1,
        version=version,
        sram_used=so + H * S * rs,
        state_bytes=parts["state_bytes"],
        state_space=parts["space"],
    )


# A prefill (S = 2) at positions 0 and 2, then decodes (S = 1) at 4..10, on one shared state.
SCHEDULE = [(2, 0), (2, 2)] + [(1, p) for p in range(4, 11)]


def run_region_steps(mods, H, H_kv, D, rng, q_scale=1.0, per_head=False):
    """Run compiled resident-attention modules (`mods`: S -> module, their function "kv") along SCHEDULE
    with random inputs; yield (position, q, k, v, out) per step, numpy float32, q [1, H, S, D] times
    `q_scale`, k and v [1, H_kv, S, D], out [1, H, S, D]. `per_head`: an int8 cache's inputs, one per KV
    head for K and then for V."""
    import tvm

    def t(x):
        return tvm.runtime.tensor(np.ascontiguousarray(x))

    for S, position in SCHEDULE:
        q = (q_scale * rng.standard_normal((1, H, S, D))).astype(np.float32)
        k, v = (rng.standard_normal((1, H_kv, S, D)).astype(np.float32) for _ in range(2))
        out = t(np.zeros((1, H, S, D), np.float32))
        new = [x[:, h : h + 1] for x in (k, v) for h in range(H_kv)] if per_head else [k, v]
        mods[S]["kv"](t(q), *map(t, new), t(np.array([position], np.int64)), out)
        yield position, q, k, v, out.numpy()
