"""docs/conformance.md's table is what this session's run of the conformance cases gave (it runs after
test_conformance.py). NPU_CONFORMANCE_WRITE=1 (scripts/conformance_table.py) writes it instead."""

import os

import pytest

from conformance import table
from conformance.case import SET_NAME
from conformance.conftest import RESULTS
from conformance.suite import all_cases


def test_docs_table_matches_the_run(request):
    results = request.config.stash.get(RESULTS, {})
    ids = {c.id for c in all_cases()}
    missing = ids - set(results)
    if missing:
        pytest.skip(f"{len(missing)} of {len(ids)} conformance cases did not run in this session")
    text = table.render({k: results[k] for k in sorted(ids)}, SET_NAME)
    if os.environ.get("NPU_CONFORMANCE_WRITE"):
        table.write_section(SET_NAME, text)
        return
    assert table.read_section(SET_NAME) == text, (
        f"docs/conformance.md ({SET_NAME} set) differs from this run: regenerate it with "
        f"`python scripts/conformance_table.py{' --full' if SET_NAME == 'full' else ''}`"
    )
