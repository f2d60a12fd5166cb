"""Collects every conformance case's outcome in the session (`RESULTS`): the verdict pytest gave the
case's test (pass, fail, xfail: from the comparison with the independent reference) and where its ops
ran (from the build report). test_table.py renders docs/conformance.md's table from it."""

import pytest

from conformance.case import Case

RESULTS = pytest.StashKey[dict]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: ARG001 - the hook's signature
    report = (yield).get_result()
    case = getattr(item, "callspec", None) and item.callspec.params.get("case")
    if not isinstance(case, Case) or (report.when != "call" and report.passed):
        return
    row = dict(item.user_properties).get("conformance", {"where": "error", "codes": []})
    if hasattr(report, "wasxfail"):
        verdict = "xfail" if report.skipped else "fail"  # strict: an unexpected pass fails
    else:
        verdict = "pass" if report.passed else "fail"
    item.config.stash.setdefault(RESULTS, {})[case.id] = {
        "family": case.family,
        "dtype": case.dtype,
        **row,
        "verdict": verdict,
    }
