"""Region names on screen are short; the JSON keeps TVM's full name (issue 32: the quickstart printed a
400-character name)."""

import tvm_npu
from tvm_npu.partition.report import short_name

LONG = "fused_" + "_".join(["relax_nn_conv2d", "relax_reshape", "relax_add", "relax_nn_relu"] * 2) + "1"


def test_short_name_shows_the_first_ops_and_the_count():
    assert short_name(LONG) == f"fused(nn_conv2d, reshape, add, ... 8 ops; {len(LONG)} characters)"
    assert short_name("fused_relax_add") == "fused_relax_add"  # short names stay as they are
    assert short_name("x" * 100) == "x" * 100  # not TVM's fused form: left alone


def test_report_table_is_short_and_json_keeps_the_full_name():
    report = tvm_npu.BuildReport()
    tvm_npu.build(tvm_npu.from_onnx(tvm_npu.models.small_cnn(seed=0)), target="npu", report=report)
    (symbol,) = report.aliases()
    assert len(symbol) > 200 and symbol.count("relax_") == 22
    legend = report.table().splitlines()[-1]
    assert legend == f"npu0 = fused(nn_conv2d, reshape, add, ... 22 ops; {len(symbol)} characters)"
    assert max(len(line) for line in report.table().splitlines()) < 160
    assert report.to_dict()["aliases"] == {symbol: "npu0"}
