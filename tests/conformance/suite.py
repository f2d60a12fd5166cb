"""Every conformance case, in a fixed order (the families' generators are deterministic)."""

from __future__ import annotations

from . import fam_conv, fam_dense, fam_pool, fam_vector, fam_views
from .case import Case

FAMILIES = (fam_conv, fam_dense, fam_pool, fam_vector, fam_views)


def all_cases() -> list[Case]:
    cases = [c for fam in FAMILIES for c in fam.cases()]
    ids = [c.id for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    assert not dup, f"conformance case ids must be unique: {dup[:5]}"
    return cases
