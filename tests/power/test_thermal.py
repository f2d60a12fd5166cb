"""The lumped RC model against the closed-form step response and against scipy's ODE solver for
piecewise-constant power (an independent integrator)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from tvm_npu import NPUError
from tvm_npu.power import THERMALS, Thermal, get_thermal


@settings(max_examples=100, deadline=None)
@given(
    r=st.floats(0.5, 50), c=st.floats(0.1, 50), ambient=st.floats(-20, 45), power=st.floats(0, 10), t=st.floats(0, 500)
)
def test_step_response_is_the_closed_form(r, c, ambient, power, t):
    th = Thermal(r_k_per_w=r, c_j_per_k=c, ambient_c=ambient)
    want = ambient + power * r * (1 - math.exp(-t / (r * c)))
    assert th.step(ambient, power, t) == pytest.approx(want, abs=1e-9)
    # One big step equals many small ones (the exact solution composes; Euler's would not).
    temp = ambient
    for _ in range(64):
        temp = th.step(temp, power, t / 64)
    assert temp == pytest.approx(want, abs=1e-9)


def test_piecewise_power_matches_an_ode_solver():
    rng = np.random.default_rng(0)
    th = Thermal(r_k_per_w=12.0, c_j_per_k=2.5, ambient_c=30.0)
    pieces = [(float(rng.uniform(0, 4)), float(rng.uniform(0.01, 20))) for _ in range(30)]
    temp, ref = th.ambient_c, th.ambient_c
    for power, dt in pieces:
        temp = th.step(temp, power, dt)
        sol = solve_ivp(
            lambda _t, y, p=power: [(p - (y[0] - th.ambient_c) / th.r_k_per_w) / th.c_j_per_k],
            (0, dt),
            [ref],
            rtol=1e-10,
            atol=1e-10,
        )
        ref = float(sol.y[0, -1])
        assert temp == pytest.approx(ref, abs=1e-6)


def test_a_big_step_is_stable_where_euler_is_not():
    th = Thermal(r_k_per_w=10.0, c_j_per_k=0.1)  # tau = 1 s
    hot = th.ambient_c + 50
    assert th.step(hot, 0.0, 10.0) == pytest.approx(th.ambient_c + 50 * math.exp(-10), abs=1e-9)
    euler = hot + 10.0 * (0.0 - (hot - th.ambient_c) / th.r_k_per_w) / th.c_j_per_k
    assert euler < th.ambient_c - 400  # Euler with dt = 10 tau overshoots far below the ambient


def test_presets_and_bad_values():
    assert get_thermal(None) is THERMALS["phone"] and get_thermal("laptop").r_k_per_w == 4.0
    assert THERMALS["phone"].tau_s == pytest.approx(30.0)
    with pytest.raises(NPUError, match="ERR_INVALID_CONFIG.*thermal preset"):
        get_thermal("fridge")
    with pytest.raises(NPUError, match="ERR_INVALID_CONFIG.*R_th"):
        Thermal(r_k_per_w=0.0)
