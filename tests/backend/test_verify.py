"""The command-stream verifier (tvm_npu.verify): static checks, data hazards decided from the waits,
and every stream the compiler produces."""

import random
import time

import numpy as np
import pytest

import tvm_npu
from builders import chain, conv_layer, dense_layer, residual_block
from tvm_npu.backend.verify import verify
from tvm_npu.contract import stream
from tvm_npu.contract.config import NPU_REF
from tvm_npu.contract.errors import NPUError
from tvm_npu.contract.stream import Command, Stream, TensorDesc

ALL = {"dma0": 0, "dma1": 0, "mac": 0, "vector": 0}
ROW = 128  # one SRAM / DDR row: 64 fp16 channels of a 1-pixel-wide map
W_BYTES = 1024  # weight region: 8 output channels x 128 bytes (1x1 conv, 64 input channels)


def load(ddr, sram, rows, waits=None, ch=0):
    return Command(
        "DMA_LOAD",
        dict(channel=ch, ddr_addr=ddr, sram_addr=sram, rows=rows, row_bytes=ROW, ddr_stride=ROW, sram_stride=ROW),
        dict(waits or {}),
    )


def store(sram, ddr, rows, waits=None, ch=1):
    return Command(
        "DMA_STORE",
        dict(channel=ch, sram_addr=sram, ddr_addr=ddr, rows=rows, row_bytes=ROW, sram_stride=ROW, ddr_stride=ROW),
        dict(waits or {}),
    )


def conv(in_addr, out_addr, rows, waits=None):
    """A 1x1 fp16 conv, 64 -> 8 channels over `rows` rows of one pixel, weights at SRAM 0."""
    return Command(
        "CONV2D",
        dict(
            dtype=1,
            in_addr=in_addr,
            in_h=rows,
            in_w=1,
            in_c=64,
            in_stride=ROW,
            w_addr=0,
            w_stride=ROW,
            kh=1,
            kw=1,
            oc=8,
            bias_addr=stream.NO_BIAS,
            out_addr=out_addr,
            out_h=rows,
            out_w=1,
            out_stride=ROW,
            stride_h=1,
            stride_w=1,
            dil_h=1,
            dil_w=1,
            groups=1,
        ),
        dict(waits or {}),
    )


def make_stream(cmds, rows_total, cfg=NPU_REF):
    """Input [1, rows_total, 1, 64] staged after the weights, output of the same shape after it."""
    view = (1, rows_total, 1, 64)
    x, y = W_BYTES, W_BYTES + rows_total * ROW
    tensors = [
        TensorDesc("input", 0, "float16", "float32", "ROWS", (rows_total, 64), view, x, ROW),
        TensorDesc("output", 0, "float16", "float32", "ROWS", (rows_total, 64), view, y, ROW),
    ]
    return Stream(cfg, tensors, cmds, bytes(W_BYTES), y + rows_total * ROW, 0)


def pipeline(tiles=4, rows=2):
    """The planner's double-buffered schedule: weights on dma1, input tiles on dma0 (refilled once the
    conv two tiles back is done), the conv, and the store of each result on dma1."""
    x, y = W_BYTES, W_BYTES + tiles * rows * ROW
    ins, outs = [W_BYTES, W_BYTES + rows * ROW], [W_BYTES + 2 * rows * ROW, W_BYTES + 3 * rows * ROW]
    cmds = [
        Command(
            "DMA_LOAD",
            dict(
                channel=1, ddr_addr=0, sram_addr=0, rows=1, row_bytes=W_BYTES, ddr_stride=W_BYTES, sram_stride=W_BYTES
            ),
            dict(ALL),
        ),
        load(x, ins[0], rows),
    ]
    for i in range(tiles):
        cmds.append(conv(ins[i % 2], outs[i % 2], rows, {"dma0": 0, "dma1": 0 if i == 0 else 1}))
        if i + 1 < tiles:
            cmds.append(load(x + (i + 1) * rows * ROW, ins[(i + 1) % 2], rows, {"mac": 1}))
        cmds.append(store(outs[i % 2], y + i * rows * ROW, rows, {"mac": 0}))
    cmds.append(Command("END", {}, dict(ALL)))
    return make_stream(cmds, tiles * rows)


def fails(s, *words):
    with pytest.raises(NPUError) as err:
        verify(s)
    assert err.value.code == "ERR_BAD_STREAM"
    for w in words:
        assert w in str(err.value), str(err.value)
    return str(err.value)


def index(s, op, n):
    """Index of the n-th command `op` of a stream."""
    return [i for i, c in enumerate(s.commands) if c.op == op][n]


def _align(n, a):
    return -(-n // a) * a


def test_double_buffered_pipeline_passes():
    verify(pipeline())
    verify(pipeline(tiles=1))


def test_missing_wait_for_the_load_names_both_commands():
    s = pipeline()
    c = index(s, "CONV2D", 2)
    del s.commands[c].waits["dma0"]
    msg = fails(s, f"command {c} (CONV2D)", "read-after-write", f"command {c - 2} (DMA_LOAD)", "wait dma0 <= 0")
    assert "SRAM" in msg


def test_load_overwriting_a_buffer_a_running_conv_reads_fails():
    s = pipeline()
    c = index(s, "CONV2D", 1)
    # Single-buffer tile 2: it lands in the buffer conv 1 is reading, and only conv 0 is waited for.
    s.commands[c + 1].args["sram_addr"] = s.commands[c].args["in_addr"]
    fails(s, f"command {c + 1} (DMA_LOAD)", "write-after-read", f"command {c} (CONV2D)", "mac <= 0")


def test_store_before_its_compute_fails():
    s = pipeline()
    st = index(s, "DMA_STORE", 1)
    s.commands[st].waits["mac"] = 1  # the store no longer waits for the conv that produced its tile
    fails(s, f"command {st} (DMA_STORE)", "read-after-write", f"command {index(s, 'CONV2D', 1)} (CONV2D)")
    s = pipeline()
    s.commands.insert(2, s.commands.pop(index(s, "DMA_STORE", 0)))  # issued before any conv
    fails(s, "command 2 (DMA_STORE)", "no earlier command wrote")


def test_compute_overwriting_a_tile_still_being_stored_fails():
    s = pipeline()
    c = index(s, "CONV2D", 2)
    s.commands[c].waits["dma1"] = 2  # the store of tile 0 (same buffer) may still be reading
    fails(s, f"command {c} (CONV2D)", "write-after-read", "(DMA_STORE)")


def test_ordering_through_a_chain_of_waits_passes():
    # store(2) waits for conv(1), which waited for load(0): load -> conv -> store orders load -> store,
    # so the store may overwrite DDR the load read without waiting on dma0 itself.
    x = W_BYTES
    cmds = [
        Command(
            "DMA_LOAD",
            dict(
                channel=1, ddr_addr=0, sram_addr=0, rows=1, row_bytes=W_BYTES, ddr_stride=W_BYTES, sram_stride=W_BYTES
            ),
        ),
        load(x, 2048, 2),
        conv(2048, 4096, 2, {"dma0": 0, "dma1": 0}),
        store(4096, x, 2, {"mac": 0}),
        Command("END", {}, dict(ALL)),
    ]
    s = make_stream(cmds, 2)
    s.tensors[1].ddr_addr = x  # the output is written in place of the input
    verify(s)
    s.commands[2].waits.pop("dma0")
    fails(s, "command 2 (CONV2D)", "command 1 (DMA_LOAD)")


def test_ddr_round_trip_needs_the_store_before_the_load():
    # Spill through DDR: store rows to the output on dma1, load them back on dma0: the load must wait
    # for the store, the channels are independent.
    cmds = [
        load(W_BYTES, 2048, 2),
        store(2048, W_BYTES + 256, 2, {"dma0": 0}, ch=1),
        load(W_BYTES + 256, 4096, 2, {}, ch=0),
        Command("END", {}, dict(ALL)),
    ]
    s = make_stream(cmds, 2)
    fails(s, "command 2 (DMA_LOAD)", "read-after-write", "DDR", "command 1 (DMA_STORE)", "dma1 <= 0")
    s.commands[2].waits["dma1"] = 0
    verify(s)


def test_end_must_wait_for_every_engine():
    s = pipeline()
    s.commands[-1].waits = {"dma0": 0, "mac": 0, "vector": 0}
    fails(s, "(END)", "dma1 (2 outstanding)")


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda s: s.commands[1].args.update(sram_addr=W_BYTES + 64), ["command 1 (DMA_LOAD)", "alignment"]),
        (lambda s: s.commands[1].args.update(ddr_stride=192, row_bytes=128), ["alignment"]),
        (lambda s: s.commands[2].args.update(out_addr=NPU_REF.sram_bytes - ROW), ["outside SRAM"]),
        (lambda s: s.commands[1].args.update(ddr_addr=s.ddr_bytes - ROW), ["outside DDR"]),
        (lambda s: s.commands[4].args.update(ddr_addr=512), ["weight region"]),
        (lambda s: s.commands.pop(), ["END"]),
        (lambda s: s.commands.insert(3, Command("END")), ["command 3 (END)", "before the last"]),
        (lambda s: s.commands[2].args.update(out_addr=W_BYTES), ["overlaps its input"]),
        (lambda s: s.commands[1].args.update(channel=2), ["DMA channel 2"]),
        (lambda s: s.commands[1].args.update(sram_stride=0), ["less than its row"]),
    ],
)
def test_static_checks(change, words):
    s = pipeline()
    assert [c.op for c in s.commands[:5]] == ["DMA_LOAD", "DMA_LOAD", "CONV2D", "DMA_LOAD", "DMA_STORE"]
    change(s)
    fails(s, *words)


def test_output_never_written_fails():
    s = pipeline()
    s.commands.pop(index(s, "DMA_STORE", 3))
    fails(s, "output 0", "never written")


def test_long_stream_is_fast():
    s = pipeline(tiles=7000, rows=1)
    assert len(s.commands) > 20000
    t = time.perf_counter()
    verify(s)
    assert time.perf_counter() - t < 10


# --- the verifier against the issue rule itself ---------------------------------------------------


def _simulate(cmds, slow):
    """Start and end cycle of every command under the issue rule (docs/npu.md section 5) when every
    command takes 1 cycle except `slow`, which takes forever. Any other durations give a schedule
    with the same orderings that the waits force."""
    ends = {e: [] for e in stream.ENGINES}
    busy = dict.fromkeys(stream.ENGINES, 0)
    prev, times = -1, []
    for i, c in enumerate(cmds):
        t = prev + 1
        for e, k in c.waits.items():
            if k < len(ends[e]):
                t = max(t, ends[e][len(ends[e]) - k - 1])
        prev = t
        if c.engine is None:
            times.append((t, t))
            continue
        start = max(t, busy[c.engine])
        busy[c.engine] = start + (10**9 if i == slow else 1)
        ends[c.engine].append(busy[c.engine])
        times.append((start, busy[c.engine]))
    return times


def _random_stream(rnd, n):
    """SRAM [0, 1024) filled first, then random loads, stores and convs over overlapping 128-byte-
    aligned ranges with random waits; END waits for everything."""
    cmds = [load(W_BYTES, 0, 8, ch=0)]
    for _ in range(n):
        waits = {e: rnd.choice([0, 0, 1, 2]) for e in stream.ENGINES if rnd.random() < 0.6}
        kind, a, b = rnd.randrange(3), rnd.randrange(7) * ROW, rnd.randrange(7) * ROW
        rows = rnd.choice([1, 2])
        if kind == 0:
            cmds.append(load(W_BYTES + a, b, rows, waits, ch=rnd.randrange(2)))
        elif kind == 1:
            cmds.append(store(a, W_BYTES + b, rows, waits, ch=rnd.randrange(2)))
        else:  # a 1x1 conv with its weights in the first row: keep the output off its operands
            a, b = ROW + rnd.randrange(3) * ROW, 4 * ROW + rnd.randrange(3) * ROW
            cmds.append(conv(a, b, 1, waits))
    cmds.append(Command("END", {}, dict(ALL)))
    s = make_stream(cmds, 8)
    s.tensors = s.tensors[:1]
    s.tensors[0].view = (1, 16, 1, 64)  # the whole activation region is staged input: no stale reads
    for c in cmds:
        if c.op == "CONV2D":
            c.args.update(oc=1, w_addr=0)
    return s


def _footprint(c):
    a = c.args
    if c.op == "DMA_LOAD":
        n = a["rows"] * ROW
        return [("DDR", a["ddr_addr"], n, False), ("SRAM", a["sram_addr"], n, True)]
    if c.op == "DMA_STORE":
        n = a["rows"] * ROW
        return [("SRAM", a["sram_addr"], n, False), ("DDR", a["ddr_addr"], n, True)]
    if c.op == "CONV2D":
        return [("SRAM", a["in_addr"], ROW, False), ("SRAM", 0, ROW, False), ("SRAM", a["out_addr"], ROW, True)]
    return []


def _oracle_ok(cmds):
    """Every pair of commands touching a common byte, one of them writing, is ordered in time when the
    earlier one is made arbitrarily slow."""
    for i, ci in enumerate(cmds):
        times = None
        for j in range(i + 1, len(cmds)):
            for si, ai, ni, wi in _footprint(ci):
                for sj, aj, nj, wj in _footprint(cmds[j]):
                    overlap = si == sj and ai < aj + nj and aj < ai + ni
                    if overlap and (wi or wj) and ci.engine != cmds[j].engine:
                        times = times or _simulate(cmds, i)
                        if times[i][1] > times[j][0]:
                            return False
    return True


def test_verifier_agrees_with_the_issue_rule_on_random_streams():
    rnd = random.Random(7)
    verdicts = {True: 0, False: 0}
    for _ in range(600):
        s = _random_stream(rnd, rnd.randrange(2, 10))
        try:
            verify(s)
            ok = True
        except NPUError:
            ok = False
        assert ok == _oracle_ok(s.commands), [(c.op, c.args, c.waits) for c in s.commands]
        verdicts[ok] += 1
    assert min(verdicts.values()) > 40, verdicts  # both outcomes are exercised


# --- every stream the compiler produces ---------------------------------------------------------


def _compiled_streams(mod, **kw):
    ex = tvm_npu.build(mod, **kw)
    return [stream.decode(bytes(m["get_stream"]())) for m in tvm_npu.runtime.npu_modules(ex)]


@pytest.mark.parametrize("name", ["conv_chain", "batch2", "bigger_than_sram", "dense_chain", "residual", "npu_small"])
def test_compiled_streams_pass(name, rng):
    kw = {}
    if name == "conv_chain":
        mod = chain(
            (1, 16, 32, 32),
            [conv_layer(rng, 16, 32, 3), conv_layer(rng, 32, 32, 3, stride=2), conv_layer(rng, 32, 16, 1, act="clip")],
        )
    elif name == "batch2":
        mod = chain((2, 8, 24, 24), [conv_layer(rng, 8, 16, 3), conv_layer(rng, 16, 8, 3, dil=2, pad=2)])
    elif name == "bigger_than_sram":  # 8 MiB in, 8 MiB out on a 2 MiB SRAM: many row tiles
        mod = chain((1, 64, 256, 256), [conv_layer(rng, 64, 64, 3)])
    elif name == "dense_chain":
        mod = chain((64, 256), [dense_layer(rng, 256, 512, act="relu"), dense_layer(rng, 512, 64)])
    elif name == "residual":
        mod = residual_block(rng)[0]
    else:
        mod, kw = residual_block(rng, c=32, hw=40)[0], {"config": "npu-small"}
    streams = _compiled_streams(mod, **kw)
    assert streams
    for s in streams:
        verify(s)


def test_compiled_int8_streams_pass():
    from tvm_npu.models import small_cnn

    rng = np.random.default_rng(20)
    mod = tvm_npu.from_onnx(small_cnn(seed=2))
    calib = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(4)]
    qmod, _ = tvm_npu.quantize(mod, calib, progress=False)
    streams = _compiled_streams(qmod)
    assert any(c.args.get("dtype") == 2 for s in streams for c in s.commands if c.op == "CONV2D")
    for s in streams:
        verify(s)


@pytest.mark.parametrize("int8", [False, True])
def test_int4_dense_streams_pass_and_their_block_is_read_whole(int8):
    """A hand-packed CONV2D with uint4 weights (format 1.4; the compiler does not emit it yet) verifies: rows of
    K / 2 bytes, the block of bias (+ S), scales and zero points. An output on the zero points (past the two
    rows a W8A16 block has) overlaps the block, as the runtime says too (ERR_INVALID_ADDR)."""
    from int4_streams import Dense, w4_stream

    d = Dense(np.random.default_rng(2), 2, 128, 24, 64, signed=False, int8=int8)
    verify(stream.decode(w4_stream(d)))
    elem, rows = (1, 2) if int8 else (2, 1)
    s_q = _align(_align(d.M * d.K * elem, 128) + d.N * d.K // 2, 128)
    zero_points = rows * _align(d.N * 4, 128) + _align(2 * d.N * 2, 128)
    with pytest.raises(NPUError, match="overlaps its int4 dequantization block"):
        verify(stream.decode(w4_stream(d, out_addr=s_q + zero_points)))


def test_a_layer_larger_than_sram_names_it_in_a_short_message():
    """ERR_SRAM_OVERFLOW names the layer and the region; TVM's name of a merged region (one word per op,
    here about 1,400 characters) is cut to its start and length, not printed whole before the message."""
    from builders import chain

    rng = np.random.default_rng(0)
    layers = [{"op": "conv", "w": rng.standard_normal((16, 3, 1, 1)).astype(np.float32)}]
    layers += [
        {"op": "conv", "w": 0.1 * rng.standard_normal((16, 16, 1, 1)).astype(np.float32), "act": "relu"}
        for _ in range(40)
    ]
    # 3 input rows of 2048 x 64 fp16 channels: 768 KiB for one output row, more than npu-small's 512 KiB.
    layers += [
        {"op": "conv", "w": rng.standard_normal((64, 16, 1, 1)).astype(np.float32)},
        {"op": "conv", "w": 0.01 * rng.standard_normal((64, 64, 3, 3)).astype(np.float32), "pad": 1},
    ]
    with pytest.raises(tvm_npu.NPUError, match="ERR_SRAM_OVERFLOW") as info:
        tvm_npu.build(chain((1, 3, 8, 2048), layers), config="npu-small")
    message = str(info.value)
    assert len(message) < 400, message
    assert message.startswith("ERR_SRAM_OVERFLOW: layer 41 (npu.conv2d) of fused_relax_nn_conv2d_")
    assert "characters) does not fit 524288 bytes of SRAM" in message
