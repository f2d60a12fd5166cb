"""GroupNorm on the NPU (issue 34): the chain rewrite/fuse_group_norm.py writes is one npu.group_norm[_silu]
layer, GN_STATS over every row tile then GN_APPLY over them (format 1.7). ONNX GroupNorms as torch exports
them (InstanceNormalization on a [N, G, -1] reshape) and as GroupNormalization-21, with and without SiLU,
against onnxruntime on the same file within 1e-2 * max(1, max|ref|); a conv -> GroupNorm -> SiLU -> conv
block as one NPU region; a map the commands do not take on the CPU with its reason."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tvm_npu
from conftest import assert_fp16_close, npu_modules, run_vm
from tvm_npu.contract import stream

RNG = np.random.default_rng(34)


def _model(shape, groups, form, silu=False, conv=False, hw_out=None):
    """An ONNX GroupNorm of an [N, C, H, W] input x: `form` "instance" (Reshape -> InstanceNormalization ->
    Reshape -> Mul -> Add, torch below opset 18) or "gn21" (GroupNormalization-21); SiLU as Sigmoid * x;
    `conv`: a 3x3 Conv before and after."""
    n, c, h, w = shape
    gamma = (1 + 0.2 * RNG.standard_normal(c)).astype(np.float32)
    beta = (0.2 * RNG.standard_normal(c)).astype(np.float32)
    inits = {}
    nodes = []
    src = "x"
    if conv:
        inits["w0"] = (0.1 * RNG.standard_normal((c, c, 3, 3))).astype(np.float32)
        inits["w1"] = (0.1 * RNG.standard_normal((c, c, 3, 3))).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["x", "w0"], ["x0"], pads=[1, 1, 1, 1]))
        src = "x0"
    if form == "instance":
        inits.update(
            s1=np.array([n, groups, -1], np.int64),
            s2=np.array(shape, np.int64),
            scale=np.ones(groups, np.float32),
            bias=np.zeros(groups, np.float32),
            gamma=gamma.reshape(c, 1, 1),
            beta=beta.reshape(c, 1, 1),
        )
        nodes += [
            helper.make_node("Reshape", [src, "s1"], ["r"]),
            helper.make_node("InstanceNormalization", ["r", "scale", "bias"], ["nr"], epsilon=1e-5),
            helper.make_node("Reshape", ["nr", "s2"], ["nb"]),
            helper.make_node("Mul", ["nb", "gamma"], ["g"]),
            helper.make_node("Add", ["g", "beta"], ["gn"]),
        ]
        opset = 17
    else:
        inits.update(gamma=gamma, beta=beta)
        nodes.append(helper.make_node("GroupNormalization", [src, "gamma", "beta"], ["gn"], num_groups=groups,
                                      epsilon=1e-5))  # fmt: skip
        opset = 21
    last = "gn"
    if silu:
        nodes += [helper.make_node("Sigmoid", ["gn"], ["sg"]), helper.make_node("Mul", ["gn", "sg"], ["act"])]
        last = "act"
    if conv:
        nodes.append(helper.make_node("Conv", [last, "w1"], ["y"], pads=[1, 1, 1, 1]))
    else:
        nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes,
        "gn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _build_and_compare(model, shape, config=None):
    report = tvm_npu.BuildReport()
    ex = tvm_npu.build(tvm_npu.from_onnx(model), report=report, config=config)
    x = (RNG.standard_normal(shape) * 3 + 1).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert_fp16_close(run_vm(ex, x), ref)
    return ex, report


def _gn_commands(ex) -> list:
    streams = [stream.decode(bytes(m["get_stream"]())) for m in npu_modules(ex)]
    return streams, [c for s in streams for c in s.commands if c.op in ("GN_STATS", "GN_APPLY")]


CASES = [  # shape, groups, form, silu
    ((1, 32, 8, 8), 8, "instance", False),
    ((1, 32, 16, 16), 8, "instance", True),
    ((1, 64, 16, 16), 32, "gn21", False),
    ((1, 64, 32, 32), 32, "gn21", True),
    ((1, 32, 32, 32), 8, "instance", False),  # rows of 4096 elements: NORM would refuse them (max_width)
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_group_norm_runs_on_the_npu_and_matches_onnxruntime(case):
    shape, groups, form, silu = CASES[case]
    ex, report = _build_and_compare(_model(shape, groups, form, silu), shape)
    composite = "npu.group_norm_silu" if silu else "npu.group_norm"
    assert [p.device for p in report.placements] == ["npu"] * len(report.placements), report.table()
    assert {p.composite for p in report.placements} == {composite}, report.table()
    streams, gn = _gn_commands(ex)
    stats = [c for c in gn if c.op == "GN_STATS"]
    apply = [c for c in gn if c.op == "GN_APPLY"]
    # Every row of the map once through the statistics, once through the apply; the first tile starts them.
    assert sum(c.args["rows"] for c in stats) == sum(c.args["rows"] for c in apply) == shape[2]
    assert [c.args["first"] for c in stats] == [1] + [0] * (len(stats) - 1)
    assert all(c.args["groups"] == groups and c.args["channels"] == shape[1] for c in gn)
    assert all(c.args["silu"] == int(silu) for c in apply)
    last_stats = max(i for i, c in enumerate(gn) if c.op == "GN_STATS")
    assert all(c.op == "GN_APPLY" for c in gn[last_stats + 1 :]) and len(gn) == last_stats + 1 + len(apply)
    assert [s.version for s in streams] == [(1, 7)]


def test_a_map_larger_than_sram_is_streamed_twice():
    """npu-small: a 64-channel 32 x 32 map (128 KiB fp16 in, as much out) is tiled in row bands, each loaded
    for the statistics and again for the apply."""
    shape = (1, 64, 32, 32)
    ex, report = _build_and_compare(_model(shape, 32, "gn21", True), shape, config="npu-small")
    assert all(p.device == "npu" for p in report.placements), report.table()
    streams, gn = _gn_commands(ex)
    stats = [c for c in gn if c.op == "GN_STATS"]
    assert len(stats) > 1
    loads = [c for s in streams for c in s.commands if c.op == "DMA_LOAD" and c.args["channel"] == 0]
    assert sum(c.args["rows"] for c in loads) == 2 * shape[2]


def test_conv_group_norm_silu_conv_is_one_npu_region():
    shape = (1, 32, 16, 16)
    _, report = _build_and_compare(_model(shape, 8, "instance", silu=True, conv=True), shape)
    assert len(report.regions) == 1 and all(p.device == "npu" for p in report.placements), report.table()
    (info,) = report.regions.values()
    assert [lay["composite"] for lay in info["layers"]] == ["npu.conv2d", "npu.group_norm_silu", "npu.conv2d"]


def test_a_map_wider_than_max_width_stays_on_the_cpu_with_its_reason():
    """W = 2304 > max_width (2048): GN_STATS and GN_APPLY do not take the row; the layer_norm keeps the
    CPU with NPU_E_WIDTH, and the result is still onnxruntime's."""
    shape = (1, 8, 1, 2304)
    _, report = _build_and_compare(_model(shape, 4, "gn21"), shape)
    norm = [p for p in report.placements if p.op == "relax.nn.layer_norm"]
    assert [(p.device, p.code) for p in norm] == [("cpu", "NPU_E_WIDTH")], report.table()


def test_each_image_of_a_batch_has_its_own_statistics():
    """N = 2 on npu-small, two row tiles an image: per image GN_STATS (first = 1 on its first tile) over its
    tiles, then GN_APPLY over them; against onnxruntime, which normalizes each image alone."""
    shape = (2, 64, 32, 32)
    ex, report = _build_and_compare(_model(shape, 32, "gn21", True), shape, config="npu-small")
    assert all(p.device == "npu" for p in report.placements), report.table()
    _, gn = _gn_commands(ex)
    per_image = len(gn) // 2
    assert len(gn) == 2 * per_image and per_image >= 4
    for image in (gn[:per_image], gn[per_image:]):
        stats = [c for c in image if c.op == "GN_STATS"]
        assert [c.op for c in image] == ["GN_STATS"] * len(stats) + ["GN_APPLY"] * len(stats)
        assert [c.args["first"] for c in stats] == [1] + [0] * (len(stats) - 1)
        assert sum(c.args["rows"] for c in stats) == shape[2]
