"""Command-stream fuzzing: mutated streams of real compiled models, validated and run on the reference NPU.

    python benchmarks/fuzz_streams.py --execs 100000 [--seed 0]

Seeds are the streams of a few compiled models (fp16 and int8, npu-ref and npu-small). Each execution
takes a seed, mutates it — random bytes, words set to edge values (0, 1, 2^31, 0xFFFFFFFF, ...), a
truncation or an extension, mostly in the header, configuration, tensor and command tables — and, for
most mutants, recomputes the CRC so the mutant reaches the deeper checks. The runtime must then either
refuse the blob with a coded NPUError at load, or run it (inputs per its tensor table) and either finish
or raise a coded NPUError. Anything else — another exception, a crash, a hang — is a bug: the script
stops and writes the blob to fuzz_failure.bin. A crash kills the process, so run campaigns in a shell
that reports the exit status. Prints counts of each outcome; docs/reliability.md records the campaigns.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # kv_streams, int4_streams: hand-packed seeds

EDGE = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 128, 4096)


def seeds() -> list:
    """Streams of small compiled models: a CNN (fp16), its int8 form, a concat / eltwise model, a
    quantized LSTM (its cell state int16 ELTWISE operands, c0 / c_T int16 region I/O: format 1.2), a
    LayerNorm -> MatMul -> RMSNorm block (NORM, format 1.4), grouped-query attention (MATMUL with b_group
    and b_transposed, format 1.4; row-tiled on npu-small), rotary embeddings (ROPE, format 1.4) with
    constant and with run-time cos / sin tables, and two attention steps over a KV cache at a run-time
    position (state tensors and pos_mode, format 1.4), the norm block with its dense weight int8
    (CONV2D's w_dtype, format 1.4: 1-byte rows and the dequantization block), and two dense layers with
    group-wise int4 weights (w_dtype int4 / uint4 | g << 8, format 1.4: packed rows, the int4 block)."""
    import tvm_npu
    from tvm_npu import runtime
    from tvm_npu.models import gqa_attention, lstm, op_zoo, small_cnn
    from tvm_npu.quantization import quantize_weights_int8

    out = []
    for config in ("npu-ref", "npu-small"):
        for model in (small_cnn(seed=0, image=16), op_zoo(seed=1, size=9)):
            mod = tvm_npu.from_onnx(model)
            ex = tvm_npu.build(mod, config=config)
            out += [bytes(m["get_stream"]()) for m in runtime.npu_modules(ex)]
            calib = [
                np.random.default_rng(i)
                .standard_normal([d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim])
                .astype(np.float32)
                for i in range(2)
            ]
            qmod, _ = tvm_npu.quantize(mod, calib, progress=False)
            out += [bytes(m["get_stream"]()) for m in runtime.npu_modules(tvm_npu.build(qmod, config=config))]
    model = lstm(T=3, B=1, I=8, H=16, seed=3)
    calib = [
        [
            np.random.default_rng(i)
            .standard_normal([d.dim_value for d in t.type.tensor_type.shape.dim])
            .astype(np.float32)
            for t in model.graph.input
        ]
        for i in range(4)
    ]
    qmod, _ = tvm_npu.quantize(tvm_npu.from_onnx(model), calib, progress=False)
    out += [bytes(m["get_stream"]()) for m in runtime.npu_modules(tvm_npu.build(qmod))]
    out += [bytes(m["get_stream"]()) for m in runtime.npu_modules(tvm_npu.build(tvm_npu.from_onnx(_norm_block())))]
    for config, t in (("npu-ref", 8), ("npu-small", 1024)):
        ex = tvm_npu.build(tvm_npu.from_onnx(gqa_attention(4, 2, s=40, t=t, d=16)), config=config)
        out += [bytes(m["get_stream"]()) for m in runtime.npu_modules(ex)]
    for config in ("npu-ref", "npu-small"):
        for run_time in (False, True):
            ex = tvm_npu.build(tvm_npu.from_onnx(_rope_block(run_time)), config=config)
            out += [bytes(m["get_stream"]()) for m in runtime.npu_modules(ex)]
    # Hand-packed (the compiler does not emit them yet): attention steps over a KV cache at a run-time
    # position (format 1.4: state tensors, the position input, pos_mode), a prefill and a decode shape.
    from kv_streams import kv_stream

    out += [kv_stream(2, 12, 16, 4, 2, 0.25), kv_stream(1, 10, 16, 4, 1, 0.25, space=5)]
    wmod = quantize_weights_int8(tvm_npu.from_onnx(_norm_block()))
    out += [bytes(m["get_stream"]()) for m in runtime.npu_modules(tvm_npu.build(wmod))]
    # Hand-packed too: dense layers with group-wise int4 weights (CONV2D's w_dtype int4 / uint4 | g << 8,
    # format 1.4), W4A16 with uint4 zero points and W4A8 with int4.
    from int4_streams import Dense, w4_stream

    rng = np.random.default_rng(21)
    out += [w4_stream(Dense(rng, 3, 128, 24, 64, signed=False)), w4_stream(Dense(rng, 2, 96, 17, 32, True, True))]
    return out


def _rope_block(run_time: bool):
    """Llama's rotate-half rotary embedding of x [1, 4, 20, 64] (ROPE, format 1.4): cos / sin [1, 1, 20, 64]
    as constants (fp16 rows in the weight region) or as model inputs."""
    from onnx import TensorProto, helper, numpy_helper

    h, s, d = 4, 20, 64
    ang = np.arange(s)[:, None] / 10000 ** (np.arange(0, d, 2) / d)[None, :]
    emb = np.concatenate([ang, ang], -1)[None, None]
    tabs = {"cos": np.cos(emb).astype(np.float32), "sin": np.sin(emb).astype(np.float32)}
    ints = {"half": [d // 2], "big": [2**63 - 1], "zero": [0], "last": [-1]}
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()]
    info = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)  # noqa: E731
    inputs = [info("x", [1, h, s, d])]
    if run_time:
        inputs += [info(n, [1, 1, s, d]) for n in tabs]
    else:
        inits += [numpy_helper.from_array(v, k) for k, v in tabs.items()]
    nodes = [
        helper.make_node("Slice", ["x", "half", "big", "last"], ["x2"]),
        helper.make_node("Slice", ["x", "zero", "half", "last"], ["x1"]),
        helper.make_node("Neg", ["x2"], ["n2"]),
        helper.make_node("Concat", ["n2", "x1"], ["rot"], axis=-1),
        helper.make_node("Mul", ["x", "cos"], ["xc"]),
        helper.make_node("Mul", ["rot", "sin"], ["rs"]),
        helper.make_node("Add", ["xc", "rs"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "rope_block", inputs, [info("y", [1, h, s, d])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _norm_block():
    """LayerNorm -> MatMul -> RMSNorm (format 1.4's NORM, both kinds, gamma and beta in the weight region)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    d = 32
    inits = [numpy_helper.from_array(rng.standard_normal(d).astype(np.float32), n) for n in ("g1", "b1", "g2")] + [
        numpy_helper.from_array(rng.standard_normal((d, d)).astype(np.float32), "w")
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g1", "b1"], ["h"], axis=-1),
        helper.make_node("MatMul", ["h", "w"], ["m"]),
        helper.make_node("RMSNormalization", ["m", "g2"], ["y"], axis=-1),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, d]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "norm_block", io[:1], io[1:], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


def mutate(blob: bytes, rng) -> bytes:
    from tvm_npu.contract import layout

    at, header = layout.HEADER.offsets, layout.HEADER.size
    b = bytearray(blob)
    tables_end = min(
        len(b),
        layout.TENSOR_TABLE_OFFSET
        + layout.TENSOR.size * struct.unpack_from("<I", b, at["num_tensors"])[0]
        + layout.COMMAND_BYTES * struct.unpack_from("<I", b, at["num_commands"])[0],
    )
    for _ in range(int(rng.integers(1, 4))):
        kind = rng.integers(0, 10)
        tables_end = min(tables_end, len(b))
        if len(b) < 4:
            break
        if kind < 4:  # a random byte, mostly in the tables
            limit = tables_end if rng.random() < 0.9 and tables_end > 0 else len(b)
            b[int(rng.integers(0, limit))] = int(rng.integers(0, 256))
        elif kind < 8:  # a 32-bit word set to an edge value or a random one
            pos = int(rng.integers(0, max(1, tables_end // 4))) * 4
            value = int(rng.choice(EDGE)) if rng.random() < 0.7 else int(rng.integers(0, 2**32))
            if pos + 4 <= len(b):
                b[pos : pos + 4] = struct.pack("<I", value)
        elif kind == 8:
            b = b[: int(rng.integers(0, len(b)))]
        else:
            b += bytes(rng.integers(0, 256, int(rng.integers(1, 256)), dtype=np.uint8))
    if len(b) >= header and rng.random() < 0.9:  # reach past the CRC check
        struct.pack_into("<I", b, at["crc32"], zlib.crc32(bytes(b[header:])) & 0xFFFFFFFF)
    return bytes(b)


def execute(blob: bytes, rt, rng) -> str:
    """'refused', 'ran', 'run-error' (a coded error while running) or 'undecodable' (loaded, but the
    Python reader refuses its configuration, so no inputs are made); raises on anything uncoded."""
    import tvm

    from tvm_npu import NPUError
    from tvm_npu.contract import stream

    try:
        mod = rt.create_module("f", blob)
    except NPUError:
        return "refused"
    try:  # the tensor table, to make inputs; the Python reader is stricter about the configuration
        parsed = stream.decode(blob)
    except NPUError:
        return "undecodable"
    args = []
    for roles in (("input", "position"), ("output",)):  # a position is an input argument (format 1.4)
        for t in sorted((t for t in parsed.tensors if t.role in roles), key=lambda t: t.io_index):
            dtype = np.dtype(t.host_dtype)  # float32, int8 or int16; a position's int32 or int64
            if t.role == "position":  # mostly within a cache's rows, sometimes past them or negative
                value = rng.integers(-2, 16, t.host_shape).astype(dtype)
            elif dtype == np.float32:
                value = rng.standard_normal(t.host_shape).astype(dtype)
            else:
                value = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, t.host_shape, dtype=dtype)
            args.append(tvm.runtime.tensor(value))
    try:
        mod["f"](*args)
    except NPUError:
        return "run-error"
    return "ran"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--execs", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from tvm_npu import runtime as rt

    corpus = seeds()
    rng = np.random.default_rng(args.seed)
    counts = {"refused": 0, "ran": 0, "run-error": 0, "undecodable": 0}
    start = time.time()
    for i in range(args.execs):
        blob = mutate(corpus[i % len(corpus)], rng)
        try:
            counts[execute(blob, rt, rng)] += 1
        except Exception as err:  # an uncoded error is a bug: keep the blob
            Path("fuzz_failure.bin").write_bytes(blob)
            print(f"execution {i}: {type(err).__name__}: {err} (blob in fuzz_failure.bin)")
            return 1
    took = time.time() - start
    print(
        f"{args.execs} executions of mutated streams ({len(corpus)} seeds, seed {args.seed}) in {took:.0f} s: "
        f"{counts['refused']} refused at load, {counts['ran']} ran, {counts['run-error']} coded errors while "
        f"running, {counts['undecodable']} loaded but not run (configuration the Python reader refuses), "
        f"0 crashes, 0 uncoded errors"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
