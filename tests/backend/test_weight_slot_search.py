"""The weight-slot search (backend/plan/weights.py) keeps the busy ranges of the layers it looks back
over merged: first fit over the merged list must be first fit over every range as given, for any
ranges, sizes and alignments (checked against the plain search over the raw list)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_npu.backend.plan.weights import _first_fit, _merged

RANGE = st.tuples(st.integers(0, 4096), st.integers(0, 512)).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=400, deadline=None)
@given(
    layers=st.lists(st.lists(RANGE, max_size=6), min_size=1, max_size=8),
    size=st.integers(1, 1024),
    alignment=st.sampled_from([1, 16, 128]),
)
def test_first_fit_over_merged_ranges_is_first_fit_over_all(layers, size, alignment):
    raw, union = [], []
    for ranges in layers:
        raw += ranges
        union = _merged(union, ranges)
        assert _first_fit(union, size, 8192, alignment) == _first_fit(raw, size, 8192, alignment)
    assert all(a[1] < b[0] for a, b in zip(union, union[1:]))  # disjoint, none touching
