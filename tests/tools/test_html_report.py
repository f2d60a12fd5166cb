"""The HTML profile report: the page, its PNG figures, the partition table and the headline numbers."""

import re

import numpy as np
import onnx
import pytest

import tvm_npu
from builders import residual_block
from tvm_npu.models import small_cnn
from tvm_npu.tools.cli import main
from tvm_npu.tools.html_report import headline, sram_spans, write_html

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    mod, _ = residual_block(np.random.default_rng(0))
    report = tvm_npu.BuildReport()
    prof = tvm_npu.profile(mod, report=report)
    out = tmp_path_factory.mktemp("html") / "block.html"
    return prof, report, write_html(prof, report, out)


def _check_page(page, pngs):
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    for png in pngs:
        assert png.parent == page.parent and f'src="{png.name}"' in text
        data = png.read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, (png, len(data))
    return text


def test_page_references_every_figure(rendered):
    _, _, paths = rendered
    page, *pngs = paths
    assert [p.name for p in pngs] == [
        "block_cycles.png",
        "block_roofline.png",
        "block_sram.png",
        "block_sram_layers.png",
    ]
    _check_page(page, pngs)


def test_partition_table_and_headline_numbers(rendered):
    prof, report, (page, *_) = rendered
    text = page.read_text()
    table = text[text.index('<table id="placements">') :]
    assert report.placements
    for p in report.placements:
        assert f"<td>{p.op}</td>" in table and f"<td>{p.var}</td>" in table
    shown = dict(re.findall(r'<td class="num" id="(\w+)">([^<]*)</td>', text))
    assert shown == headline(prof)
    assert int(shown["total_cycles"]) == prof["total_cycles"]
    assert int(shown["ddr_bytes"]) == prof["ddr_bytes"]
    assert int(shown["compulsory_ddr_bytes"]) == prof["compulsory_ddr_bytes"]
    assert int(shown["sram_peak_bytes"]) == prof["sram_peak_bytes"]
    assert shown["mac_utilization"] == f"{100 * prof['mac_utilization']:.1f}%"


def test_sram_spans_come_from_the_planner(rendered):
    # vector layers work on resident tensors in place: their own buffers may be empty (base == top)
    prof, report, _ = rendered
    spans = sram_spans(prof, report)
    assert len([sp for sp in spans if sp[5] == "buffers"]) == len(prof["layers"])
    weights = [sp for sp in spans if sp[5] == "weights"]
    assert len(weights) == sum(1 for lay in prof["layers"] if lay["weight_bytes"])
    assert max(hi for _, _, _, hi, *_ in spans) == prof["sram_peak_bytes"]
    assert all(0 <= lo <= hi <= prof["config"]["sram_bytes"] and s <= e for s, e, lo, hi, *_ in spans)
    # A weight block's span starts no later than its layer's buffers' span and ends with it.
    ends = {sp[4]["name"]: (sp[0], sp[1]) for sp in spans if sp[5] == "buffers"}
    assert all(s <= ends[lay["name"]][0] and e == ends[lay["name"]][1] for s, e, _, _, lay, _ in weights)


def test_without_a_report_there_is_no_sram_timeline_or_table(rendered, tmp_path):
    prof, _, _ = rendered
    page, *pngs = write_html(prof, None, tmp_path / "bare.html")
    text = _check_page(page, pngs)
    assert len(pngs) == 3 and 'id="placements"' not in text  # the per-layer SRAM figure is the profile's own


def test_cli_profile_writes_html(tmp_path, capsys):
    onnx.save(small_cnn(seed=0), str(tmp_path / "model.onnx"))
    out = tmp_path / "out" / "model.html"
    assert main(["profile", str(tmp_path / "model.onnx"), "--html", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    pngs = sorted(out.parent.glob("model_*.png"))
    assert [p.name for p in pngs] == [
        "model_cycles.png",
        "model_roofline.png",
        "model_sram.png",
        "model_sram_layers.png",
    ]
    text = _check_page(out, pngs)
    # One placement row per op, with the device the build chose (small_cnn: all 17 on the NPU). The page's
    # CSS names the classes too, so count rows, not words.
    table = text[text.index('<table id="placements">') :]
    table = table[: table.index("</table>")]
    assert table.count('<tr class="npu">') == 17 and '<tr class="cpu">' not in table


def test_page_shows_sram_utilization_per_layer(rendered):
    # The residual block on npu-ref: peak 38912 B while the 1x1 conv runs (counted by hand in
    # tests/backend/test_sram_usage.py); one row per layer with its own numbers, no fragmentation.
    prof, _, (page, *_) = rendered
    text = page.read_text()
    assert prof["sram"]["peak_bytes"] == 38912
    assert f'id="sram_peak_utilization">{100 * 38912 / 2**21:.1f}%<' in text
    table = text[text.index('<table id="sram">') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == 1 + len(prof["layers"])
    for lay in prof["layers"]:
        s = lay["sram"]
        cells = [str(s["peak_bytes"]), f"{100 * s['peak_utilization']:.2f}%", str(s["largest_free_block_at_peak"])]
        assert all(f'<td class="num">{c}</td>' in table for c in cells)
    assert "No fragmentation warnings." in text
