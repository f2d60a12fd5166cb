"""The forms exporters write a decoder's cache append and its K^T in, one recognizer per file, listed in
the two tables below (docs/llm_import.md, "Forms"). The next exporter's form is one new file here, one
line in a table and a test in tests/llm_import/test_import_forms.py.

APPENDS: each module's `find(graph, past, ctx) -> Append | None` follows the past input's data flow to
the node that appends this call's rows along the sequence axis and to the graph output that returns the
result (the present); decoder_cache.py turns the append into the static cache's ScatterND. The first
form that matches wins; none is a coded error. sliding_crop.py (the append inside a sliding window's
crops) is not in the table: decoder_crops.py runs it before folding and removes the crops.

KEY_TRANSPOSES: each module's `rewrite(model, shapes) -> int` rewrites its form of K^T, in the step
model, into the one 4-D Transpose(0, 1, 3, 2) the resident cache recognises (partition/kv_cache_check.py),
exactly (a reshape or transpose order that moves no element differently), and returns how many it
rewrote.
"""

from __future__ import annotations

from . import concat, einsum, kt_reshape3d
from .common import Append

APPENDS = [concat]
KEY_TRANSPOSES = [kt_reshape3d, einsum]

__all__ = ["APPENDS", "KEY_TRANSPOSES", "Append"]
