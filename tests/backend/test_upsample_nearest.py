"""Nearest-neighbour upsampling on the NPU as addressing (issue 34): an ONNX Resize as torch exports
F.interpolate(scale_factor=2, mode="nearest") (opset 17, asymmetric + floor, scales), and in its opset-11+
sizes form and ONNX's defaults (half_pixel + round_prefer_floor), is one npu.resize layer of fH * fW POOL
1x1 copies per row tile: bit-exact against onnxruntime on fp16-representable inputs (a copy), and in int8
(QDQ with one scale and zero point) against onnxruntime's QDQ run. The C++ runtime's output equals a numpy
model of the compiled stream (DMA and POOL per docs/npu.md sections 3 and 6); SD-1.5's 16x16x1280 map is
tiled (2.6 MB of output, SRAM 2 MiB); the modes whose mapping is not floor(o / f) stay on the CPU with
their reason; conv -> upsample -> conv is one NPU region."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import npu_modules, run_vm
from tvm_npu.contract import stream

RNG = np.random.default_rng(3434)


def _resize_model(shape, scales=None, sizes=None, opset=17, conv=False, roi=False, **attrs):
    """Resize(x) of an [N, C, H, W] float input, `scales` or `sizes` given as initializers; `roi`: an
    empty roi initializer (opset 11's form) instead of the empty name torch writes; `conv`: a 3x3 Conv
    before and after."""
    n, c, h, w = shape
    if scales is not None:
        out = (n, c, int(h * scales[2]), int(w * scales[3]))
    else:
        out = tuple(sizes)
    inits = {}
    nodes = []
    src = "x"
    if conv:
        inits["w0"] = (0.1 * RNG.standard_normal((c, c, 3, 3))).astype(np.float32)
        inits["w1"] = (0.1 * RNG.standard_normal((c, c, 3, 3))).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["x", "w0"], ["x0"], pads=[1, 1, 1, 1]))
        src = "x0"
    if roi:
        inits["roi"] = np.zeros(0, np.float32)
    ins = [src, "roi" if roi else ""]
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        ins.append("scales")
    else:
        inits["sizes"] = np.array(sizes, np.int64)
        ins += ["", "sizes"]
    nodes.append(helper.make_node("Resize", ins, ["r" if conv else "y"], **attrs))
    if conv:
        nodes.append(helper.make_node("Conv", ["r", "w1"], ["y"], pads=[1, 1, 1, 1]))
    graph = helper.make_graph(
        nodes,
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


TORCH = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")


def _fp16_input(shape):
    return (RNG.standard_normal(shape) * 4).astype(np.float16).astype(np.float32)


def _ort(model, x, int8=False):
    opts = ort.SessionOptions()
    if int8:
        opts.add_session_config_entry("session.qdqisint8allowed", "1")
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _build(model, config=None):
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report, config=config)
    return ex, report


def _streams(ex):
    return [stream.decode(bytes(m["get_stream"]())) for m in npu_modules(ex)]


def _pools(ex):
    return [c for s in _streams(ex) for c in s.commands if c.op == "POOL"]


CASES = [  # shape, scales or sizes, attributes, opset, roi initializer
    ((1, 16, 6, 5), dict(scales=[1, 1, 2, 2]), TORCH, 17, False),  # torch's export
    ((2, 8, 4, 4), dict(scales=[1, 1, 2, 2]), TORCH, 11, True),  # opset 11: an empty roi tensor
    ((1, 32, 5, 7), dict(sizes=[1, 32, 10, 14]), dict(mode="nearest"), 13, False),  # ONNX's defaults, sizes
    ((1, 8, 3, 4), dict(scales=[1, 1, 3, 2]), TORCH, 17, False),  # other integer factors
    (
        (1, 64, 4, 4),
        dict(scales=[1, 1, 2, 2]),
        dict(TORCH, coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil"),
        17,
        False,
    ),  # fmt: skip
    # (o + 0.5) / 2 floored is o // 2 too: the mapping decides, not the name
    (
        (1, 8, 4, 4),
        dict(scales=[1, 1, 2, 2]),
        dict(TORCH, coordinate_transformation_mode="tf_half_pixel_for_nn"),
        17,
        False,
    ),  # fmt: skip
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_nearest_upsampling_is_bit_exact_against_onnxruntime(case):
    shape, size, attrs, opset, roi = CASES[case]
    model = _resize_model(shape, opset=opset, roi=roi, **size, **attrs)
    ex, report = _build(model)
    assert [p.composite for p in report.placements] == ["npu.resize"], report.table()
    x = _fp16_input(shape)
    want = _ort(model, x)
    got = run_vm(ex, x)
    assert got.shape == want.shape and np.array_equal(got, want)
    # Independent of onnxruntime: every output pixel is input pixel (o // fH, o // fW).
    fh, fw = want.shape[2] // shape[2], want.shape[3] // shape[3]
    assert np.array_equal(got, np.repeat(np.repeat(x, fh, axis=2), fw, axis=3))
    pools = _pools(ex)
    assert len(pools) % (fh * fw) == 0 and all(p.args["kh"] == p.args["kw"] == 1 for p in pools)
    assert all(p.args["out_pstride"] == fw * shape[1] * 2 for p in pools)


def _qdq_resize_model(shape, out_shape, scale_in, scale_out, zp):
    """quantize -> dequantize -> Resize 2x -> quantize -> dequantize, the Resize's input and output
    quantized with their own scales and one zero point (as onnxruntime's static quantizer writes it)."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("Resize", ["xd", "", "scales"], ["r"], **TORCH),
        helper.make_node("QuantizeLinear", ["r", "s2", "z"], ["rq"]),
        helper.make_node("DequantizeLinear", ["rq", "s2", "z"], ["y"]),
    ]
    inits = {"s": np.array(np.float32(scale_in)), "s2": np.array(np.float32(scale_out)), "z": np.array(np.int8(zp))}
    inits = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    graph = helper.make_graph(
        nodes,
        "qresize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_int8_upsampling_copies_codes_against_onnxruntime():
    """quantize -> dequantize -> Resize -> quantize -> dequantize with one scale and zero point: the NPU
    copies the int8 codes; onnxruntime's QDQ run (qdqisint8allowed) gives the same values."""
    shape = (1, 32, 4, 6)
    model = _qdq_resize_model(shape, (1, 32, 8, 12), 0.05, 0.05, 3)
    ex, report = _build(model)
    assert "npu.qresize" in {p.composite for p in report.placements}, report.table()
    assert {p.device for p in report.placements} == {"npu"}, report.table()
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)  # beyond int8's range too: saturates the same
    want = _ort(model, x, int8=True)
    np.testing.assert_array_equal(run_vm(ex, x), want)
    pools = _pools(ex)
    assert len(pools) == 4 and all(p.args["dtype"] == stream.DTYPES["int8"] for p in pools)


def test_int8_upsampling_with_two_scales_stays_on_the_cpu():
    shape = (1, 32, 4, 4)
    model = _qdq_resize_model(shape, (1, 32, 8, 8), 0.05, 0.1, 0)
    ex, report = _build(model)
    resize = [p for p in report.placements if p.op == "relax.image.resize2d"]
    assert [p.device for p in resize] == ["cpu"], report.table()
    # npu.qresize refuses it (NPU_E_QUANT_SCALE); the float resize between the QDQ pairs would then be a
    # region of its own, too small for its boundary.
    assert resize[0].code in ("NPU_E_QUANT_SCALE", "NPU_E_REGION_TOO_SMALL"), report.table()
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)
    np.testing.assert_array_equal(run_vm(ex, x), _ort(model, x, int8=True))


REFUSED = [  # attributes, scales, reason code, words of the reason's detail
    (dict(mode="linear"), [1, 1, 2, 2], "NPU_E_RESIZE", "method linear"),
    (TORCH, [1, 1, 1.5, 1.5], "NPU_E_RESIZE", "not an integer upsampling"),
    (dict(TORCH, coordinate_transformation_mode="align_corners"), [1, 1, 2, 2], "NPU_E_RESIZE", "align_corners"),
    # half_pixel is fine with round_prefer_floor, not with floor: output 2 reads input 0 (the name does not decide)
    (dict(TORCH, coordinate_transformation_mode="half_pixel"), [1, 1, 2, 2], "NPU_E_RESIZE", "maps output H 2"),
    (dict(TORCH, nearest_mode="ceil"), [1, 1, 2, 2], "NPU_E_RESIZE", "not floor"),
    (
        dict(mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn"),
        [1, 1, 2, 2],
        "NPU_E_RESIZE",
        "not floor",
    ),
    (TORCH, [1, 1, 0.5, 0.5], "NPU_E_RESIZE", "not an integer upsampling"),
]


@pytest.mark.parametrize("case", range(len(REFUSED)))
def test_modes_that_do_not_map_stay_on_the_cpu_with_their_reason(case):
    attrs, scales, code, detail = REFUSED[case]
    shape = (1, 16, 4, 4)
    model = _resize_model(shape, scales=scales, **attrs)
    ex, report = _build(model)
    (p,) = [p for p in report.placements if p.op == "relax.image.resize2d"]
    assert p.device == "cpu" and p.code == code and detail in p.reason, report.table()
    x = _fp16_input(shape)
    np.testing.assert_allclose(run_vm(ex, x), _ort(model, x), rtol=1e-6, atol=1e-6)


def test_channels_that_do_not_fill_a_beat_stay_on_the_cpu():
    """4 fp16 channels are 8 bytes: a copy's output address would not be a multiple of 16."""
    model = _resize_model((1, 4, 4, 4), scales=[1, 1, 2, 2], **TORCH)
    _, report = _build(model)
    (p,) = [p for p in report.placements if p.op == "relax.image.resize2d"]
    assert p.device == "cpu" and p.code == "NPU_E_RESIZE" and "4 channels of 2 bytes" in p.reason


def _numpy_stream(s, x: np.ndarray) -> np.ndarray:
    """The output of stream `s` for input `x`, executed by a numpy model of the contract: DMA_LOAD /
    DMA_STORE copy `rows` rows of `row_bytes` between the strided DDR and SRAM rows; a POOL with a 1x1
    max window and strides 1 writes input pixel (r, q) to output pixel (r, q), pixels `pstride` apart
    (0: packed). Only the commands an upsampling emits are modelled: anything else fails the test."""
    ddr = np.zeros(s.ddr_bytes + (1 << 20), np.uint8)
    sram = np.zeros(s.config.sram_bytes, np.uint8)
    ddr[: len(s.weights)] = np.frombuffer(s.weights, np.uint8)
    inp = next(t for t in s.tensors if t.role == "input")
    out = next(t for t in s.tensors if t.role == "output")
    n, h, w, c = inp.view
    rows = x.transpose(0, 2, 3, 1).astype(np.float16).reshape(n * h, w * c * 2 // 2).view(np.uint8)
    for r in range(n * h):
        ddr[inp.ddr_addr + r * inp.row_stride :][: w * c * 2] = rows[r]
    for cmd in s.commands:
        a = cmd.args
        if cmd.op in ("DMA_LOAD", "DMA_STORE"):
            src, dst = (ddr, sram) if cmd.op == "DMA_LOAD" else (sram, ddr)
            s0, d0 = (a["ddr_addr"], a["sram_addr"]) if cmd.op == "DMA_LOAD" else (a["sram_addr"], a["ddr_addr"])
            ss, ds = (
                (a["ddr_stride"], a["sram_stride"]) if cmd.op == "DMA_LOAD" else (a["sram_stride"], a["ddr_stride"])
            )
            for r in range(a["rows"]):
                dst[d0 + r * ds :][: a["row_bytes"]] = src[s0 + r * ss :][: a["row_bytes"]]
        elif cmd.op == "POOL":
            assert (a["kh"], a["kw"], a["stride_h"], a["stride_w"], a["kind"], a["act"]) == (1, 1, 1, 1, 1, 0)
            px = a["c"] * 2
            ip, op = a["in_pstride"] or px, a["out_pstride"] or px
            for r in range(a["out_h"]):
                for q in range(a["out_w"]):
                    src = a["in_addr"] + r * a["in_stride"] + q * ip
                    sram[a["out_addr"] + r * a["out_stride"] + q * op :][:px] = sram[src : src + px]
        else:
            assert cmd.op == "END", cmd.op
    n, h, w, c = out.view
    y = np.stack([ddr[out.ddr_addr + r * out.row_stride :][: w * c * 2] for r in range(n * h)])
    return y.view(np.float16).reshape(n, h, w, c).transpose(0, 3, 1, 2).astype(np.float32)


@pytest.mark.parametrize(
    "shape, scales, config",
    [
        ((1, 16, 6, 5), [1, 1, 2, 2], None),
        ((1, 32, 40, 40), [1, 1, 2, 2], "npu-small"),
        ((2, 32, 40, 24), [1, 1, 3, 2], "npu-small"),
    ],
)
def test_the_runtime_runs_the_stream_as_its_numpy_model(shape, scales, config):
    """One tile, and row bands streamed through SRAM (npu-small), of one and of two images."""
    model = _resize_model(shape, scales=scales, **TORCH)
    ex, _ = _build(model, config=config)
    x = _fp16_input(shape)
    (s,) = _streams(ex)
    pools = [c for c in s.commands if c.op == "POOL"]
    per_band = scales[2] * scales[3]
    assert len(pools) % per_band == 0 and (len(pools) > per_band * shape[0]) == (config is not None)
    assert np.array_equal(run_vm(ex, x), _numpy_stream(s, x))


def test_an_sd15_upsample_larger_than_sram_is_tiled():
    """SD-1.5's last up block input: 16x16x1280 fp16 (640 KiB) -> 32x32x1280 (2.5 MiB, more than npu-ref's
    2 MiB SRAM): row bands of input, every DMA address 128-aligned, the estimate the cost model's."""
    shape = (1, 1280, 16, 16)
    model = _resize_model(shape, scales=[1, 1, 2, 2], **TORCH)
    ex, report = _build(model)
    assert [p.device for p in report.placements] == ["npu"], report.table()
    x = _fp16_input(shape)
    got = run_vm(ex, x)
    assert np.array_equal(got, np.repeat(np.repeat(x, 2, axis=2), 2, axis=3))
    (s,) = _streams(ex)
    pools = [c for c in s.commands if c.op == "POOL"]
    dmas = [c for c in s.commands if c.op.startswith("DMA")]
    assert len(pools) // 4 >= 2  # more than one tile
    assert sum(p.args["in_h"] for p in pools) == 4 * 16  # every input row, four times
    assert all(d.args["ddr_addr"] % 128 == 0 and d.args["sram_addr"] % 128 == 0 for d in dmas)
    stores = sum(d.args["rows"] for d in dmas if d.op == "DMA_STORE")
    assert stores == 32
    est = tvm_npu.backend.plan.cost_model.estimate(s.config, s.commands)
    assert est.ddr_write_bytes == 32 * 32 * 1280 * 2 and est.ddr_read_bytes == 16 * 16 * 1280 * 2
    assert est.vector_cycles > 0


def test_conv_upsample_conv_is_one_npu_region():
    shape = (1, 16, 6, 6)
    model = _resize_model(shape, scales=[1, 1, 2, 2], conv=True, **TORCH)
    ex, report = _build(model)
    assert {p.device for p in report.placements} == {"npu"}, report.table()
    assert len(npu_modules(ex)) == 1 and len(_streams(ex)) == 1
    x = _fp16_input(shape)
    want = _ort(model, x)
    got = run_vm(ex, x)
    assert float(np.abs(got - want).max()) <= 1e-2 * max(1.0, float(np.abs(want).max()))


@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 3, 2]])
def test_conv_upsample_conv_on_a_small_sram_is_tiled_around_residents(scales):
    """npu-small (512 KiB): a 32-channel 40x40 map upsampled between two convolutions (400 and 600 KiB of
    fp16 output) is tiled in row bands; within fp16's bound of onnxruntime, every copy a POOL 1x1."""
    shape = (1, 32, 40, 40)
    model = _resize_model(shape, scales=scales, conv=True, **TORCH)
    ex, report = _build(model, config="npu-small")
    assert {p.device for p in report.placements} == {"npu"}, report.table()
    x = _fp16_input(shape)
    want = _ort(model, x)
    got = run_vm(ex, x)
    assert float(np.abs(got - want).max()) <= 1e-2 * max(1.0, float(np.abs(want).max()))
    pools = _pools(ex)
    fh, fw = scales[2], scales[3]
    assert len(pools) > fh * fw and sum(p.args["in_h"] for p in pools) == fh * fw * shape[2]


def test_a_map_whose_row_does_not_fit_sram_stays_on_the_cpu():
    """npu-small: 1024 channels of 64 pixels are a 128 KiB input row and a 256 KiB output row: two of each
    (with the copies' overhang) exceed 512 KiB."""
    model = _resize_model((1, 1024, 1, 64), scales=[1, 1, 2, 2], **TORCH)
    _, report = _build(model, config="npu-small")
    (p,) = [p for p in report.placements if p.op == "relax.image.resize2d"]
    assert p.device == "cpu" and p.code == "NPU_E_SRAM" and "> 524288" in p.reason, report.table()


def test_an_output_wider_than_max_width_stays_on_the_cpu():
    model = _resize_model((1, 8, 2, 1100), scales=[1, 1, 2, 2], **TORCH)
    _, report = _build(model)
    (p,) = [p for p in report.placements if p.op == "relax.image.resize2d"]
    assert p.device == "cpu" and p.code == "NPU_E_WIDTH" and "width 2200 > 2048" in p.reason, report.table()
