"""Fixtures of tests/llm: each test runs on both decoders (llm/reference.py), from a reset cache."""

import pytest

from llm.reference import BUILDERS, OrtDecoder, compiled


@pytest.fixture(scope="session", params=sorted(BUILDERS))
def arch(request):
    return request.param


@pytest.fixture
def lm(arch):
    m = compiled(arch)
    m.reset()
    return m


@pytest.fixture(scope="session")
def reference(arch):
    return OrtDecoder(BUILDERS[arch])
