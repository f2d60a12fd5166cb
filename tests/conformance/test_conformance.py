"""The differential conformance suite (issue 19): every case of conformance.suite, built for target "npu"
and compared with TVM's llvm build and onnxruntime (fp16) or onnxruntime's integer kernels (int8).
Where a case runs is recorded for docs/conformance.md (test_table.py); a wrong answer fails here."""

import logging

import pytest

from conformance.runner import run_case
from conformance.suite import all_cases


def _params():
    for case in all_cases():
        marks = [pytest.mark.xfail(strict=True, reason=case.xfail)] if case.xfail else []
        yield pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_case(case, request):
    logging.getLogger("tvm_npu").setLevel(logging.ERROR)
    result = run_case(case)
    request.node.user_properties.append(("conformance", result.row()))
    assert result.ok, f"{case.id}: {result.detail}"
