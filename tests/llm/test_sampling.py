"""The CPU samplers: greedy, top-k and top-p draw only from their candidate set, reproducibly by seed."""

import numpy as np

from tvm_npu.llm import greedy, top_k, top_p

LOGITS = np.log(np.array([0.05, 0.5, 0.3, 0.15], np.float32))


def test_greedy_is_argmax():
    assert greedy(LOGITS) == 1


def test_top_k_draws_from_the_k_largest_by_seed():
    a, b = top_k(2, seed=3), top_k(2, seed=3)
    assert [a(LOGITS) for _ in range(20)] == [b(LOGITS) for _ in range(20)]
    sampler = top_k(2, seed=0)
    seen = {sampler(LOGITS) for _ in range(200)}
    assert seen == {1, 2}
    assert {top_k(1, seed=s)(LOGITS) for s in range(5)} == {1}


def test_top_p_keeps_the_smallest_set_reaching_p():
    sampler = top_p(0.7, seed=0)  # 0.5 + 0.3 reach 0.7: tokens 1 and 2
    draws = [sampler(LOGITS) for _ in range(300)]
    assert set(draws) == {1, 2}
    assert 0.5 < draws.count(1) / len(draws) < 0.75  # 0.5 / 0.8 = 0.625
    assert {top_p(0.4, seed=s)(LOGITS) for s in range(5)} == {1}
