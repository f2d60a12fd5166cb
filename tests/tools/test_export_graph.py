"""`tvm-npu export-graph` / tvm_npu.tools.export_graph: a compiled library as an ONNX graph for Netron.
Checked with onnx.checker, against the source models (their ops, shapes and quantization scales) and the
runtime's own counters of an independent run, and opened in the netron package's server."""

import json
import re
import urllib.request

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import tvm_npu
from conftest import load_script, run_vm
from qdq_models import mobilenet_v2_shaped, quantize_with_ort
from tvm_npu.tools.export_graph import build_model, export_graph


def attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def regions(model):
    return [n for n in model.graph.node if n.domain == "npu"]


def value_infos(model):
    g = model.graph
    return {v.name: v for v in [*g.input, *g.output, *g.value_info]}


def runtime_last(ex, *xs):
    """Per region symbol, the runtime's counters of an independent run of the executable."""
    _, vm = run_vm(ex, *xs, return_vm=True)
    return {str(m["get_symbol"]()): tvm_npu.runtime.profile_of(m)["last"] for m in tvm_npu.runtime.npu_modules(vm)}


@pytest.fixture(scope="module")
def mobilenet_int8(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mbv2")
    rng = np.random.default_rng(100)
    calib = [rng.standard_normal((1, 3, 64, 64)).astype(np.float32) for _ in range(4)]
    q = quantize_with_ort(mobilenet_v2_shaped(seed=0, size=64, width=0.5), calib, tmp / "mbv2.onnx")
    ex = tvm_npu.build(tvm_npu.from_onnx(q))
    lib = tvm_npu.export_library(ex, tmp / "mbv2.so")
    out = export_graph(lib, tmp / "mbv2.npu.onnx")
    return q, ex, out, calib[0]


def wake_word_model():
    """The tutorial's streaming LSTM keyword spotter (tutorials/lstm_wake_word.py's export), with seeded
    weights in place of the trained ones."""
    kws = load_script("tutorials/lstm_wake_word.py")
    rng = np.random.default_rng(0)
    h, bands, classes = kws.HIDDEN, kws.BANDS, kws.CLASSES
    p = {
        "Wx": rng.standard_normal((bands, 4 * h)) * 0.2,
        "Wh": rng.standard_normal((h, 4 * h)) * 0.2,
        "b": rng.standard_normal(4 * h) * 0.1,
        "Wy": rng.standard_normal((h, classes)) * 0.2,
        "by": rng.standard_normal(classes) * 0.1,
    }
    return kws.export(p, (np.zeros(bands), np.ones(bands))), kws


@pytest.fixture(scope="module")
def wake_word(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kws")
    model, kws = wake_word_model()
    ex = tvm_npu.build(tvm_npu.from_onnx(model))
    lib = tvm_npu.export_library(ex, tmp / "kws.so")
    return model, kws, ex, export_graph(lib, tmp / "kws.npu.onnx")


def test_mobilenet_int8_graph_checks_and_carries_the_regions(mobilenet_int8):
    q, ex, path, x = mobilenet_int8
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    (node,) = regions(model)  # the whole network is one NPU region
    a = attrs(node)
    # Its layers: every Conv of the QDQ model is one conv2d of the region, in order.
    convs = sum(n.op_type == "Conv" for n in q.graph.node)
    assert [x.decode() for x in a["layers"]].count("nn_conv2d") == convs == 52
    # Cycles, MACs and DDR bytes: the runtime's counters of an independent run of the same executable.
    last = runtime_last(ex, x)[a["symbol"].decode()]
    for key, attr in (("total_cycles", "cycles"), ("macs", "macs"), ("ddr_read_bytes", "ddr_read_bytes")):
        assert a[attr] == last[key] > 0, key
    # The input is quantized as it is staged: its scale and zero point are the QDQ model's.
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    ql = next(n for n in q.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "input")
    vi = value_infos(model)["input"]
    props = {p.key: p.value for p in vi.metadata_props}
    assert props["npu_dtype"] == "int8" and props["host_shape"] == "[1, 3, 64, 64]"
    assert float(props["scale"]) == float(inits[ql.input[1]]) and int(props["zero_point"]) == int(inits[ql.input[2]])
    assert [d.dim_value for d in vi.type.tensor_type.shape.dim] == [1, 3, 64, 64]
    assert a["io_scales"][0] == pytest.approx(float(inits[ql.input[1]]), rel=1e-7)
    # Tiling: one CONV2D tile at least per conv, each with its SRAM addresses.
    tiles = [json.loads(t) for t in a["tiling"]]
    assert sum(t["op"] == "CONV2D" for t in tiles) >= convs and all("out_addr" in t["sram"] for t in tiles)


def test_wake_word_graph_checks_with_state_and_cpu_ops(wake_word):
    model, kws, ex, path = wake_word
    g = onnx.load(path)
    onnx.checker.check_model(g, full_check=True)
    assert [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in g.graph.input] == [
        ("X", [kws.CHUNK, 1, kws.BANDS]),
        ("h0", [1, 1, kws.HIDDEN]),
        ("c0", [1, 1, kws.HIDDEN]),
    ]
    assert [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in g.graph.output] == [
        [1, kws.CLASSES],
        [1, 1, kws.HIDDEN],
        [1, 1, kws.HIDDEN],
    ]
    nodes = regions(g)
    assert len(nodes) == len(tvm_npu.runtime.npu_modules(ex)) >= 1
    xs = [np.zeros((kws.CHUNK, 1, kws.BANDS), np.float32), *[np.zeros((1, 1, kws.HIDDEN), np.float32)] * 2]
    last = runtime_last(ex, *xs)
    assert {attrs(n)["symbol"].decode(): attrs(n)["cycles"] for n in nodes} == {
        s: p["total_cycles"] for s, p in last.items()
    }


def test_cpu_ops_are_onnx_ops_where_they_fit(rng, tmp_path):
    from builders import chain, conv_layer

    layers = [conv_layer(rng, 3, 8, 3), {"op": "cpu", "fn": "sin"}, conv_layer(rng, 8, 8, 3)]
    layers.append({"op": "cpu", "fn": "reshape", "shape": (1, 512)})
    ex = tvm_npu.build(chain((1, 3, 8, 8), layers))
    model = build_model(ex)
    onnx.checker.check_model(model, full_check=True)
    ops = [(n.domain, n.op_type) for n in model.graph.node]
    assert ops == [("npu", "NPURegion"), ("", "Sin"), ("npu", "NPURegion"), ("tvm", "reshape")]
    out = model.graph.output[0]
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [1, 512]


def test_cli_export_graph(mobilenet_int8, tmp_path, capsys):
    from tvm_npu.tools.cli import main

    path = mobilenet_int8[2]
    lib = path.with_name("mbv2.so")
    assert main(["export-graph", str(lib), "-o", str(tmp_path / "g.onnx")]) == 0
    assert f"wrote {tmp_path / 'g.onnx'}" in capsys.readouterr().out
    onnx.checker.check_model(onnx.load(tmp_path / "g.onnx"))


def test_netron_serves_both_graphs(mobilenet_int8, wake_word):
    netron = pytest.importorskip("netron", reason="the netron package is not installed (pip install netron)")
    for path in (mobilenet_int8[2], wake_word[3]):
        address = netron.start(str(path), browse=False)
        try:
            base = f"http://{address[0]}:{address[1]}"
            page = urllib.request.urlopen(base + "/", timeout=30).read().decode()
            (file_url,) = re.findall(r'<meta name="file" content="([^"]+)"', page)
            assert file_url.endswith(path.name)
            served = urllib.request.urlopen(base + file_url, timeout=30).read()
            assert served == path.read_bytes()
            assert onnx.load_from_string(served).graph.node  # what Netron loads is the graph
        finally:
            netron.stop(address)
