"""Newton--Schulz schedules in isolab.linalg: Polar Express (Amsel, Persson, Musco, Gower 2025)
against its own construction and against a float64 SVD, beside Jordan's quintic and the cubic."""

import math

import numpy as np
import pytest
import torch

from isolab import linalg
from isolab.linalg import (
    CUBIC,
    POLAR_EXPRESS_MINIMAX,
    POLAR_EXPRESS_SAFETY,
    QUINTIC,
    msign_newton_schulz,
    newton_schulz_map,
    newton_schulz_schedule,
)

F64 = torch.float64
LOW = 1e-3  # the smallest normalized singular value the published schedule is built for
CUSHION = 0.02407327424182761  # the cushion of the paper's code (its ``optimal_composition``)


# ----------------------------------------------------------------------------- the construction
def minimax_quintic(lo, hi):
    """The odd quintic ``p`` minimizing ``max |1 - p(x)|`` on ``[lo, hi]``, by Remez exchange.

    The optimum equioscillates at 4 points ``lo < q < r < hi`` (``1 - p = +E, -E, +E, -E``),
    where ``q, r`` are the critical points of ``p``: solve the 4 x 4 linear system for
    ``(a, b, c, E)`` at the current points, move ``q, r`` to the new critical points, repeat.
    """
    if lo / hi > 1 - 5e-6:  # the interval is a point: the limit of the minimax quintics
        return 15 / 8 / hi, -10 / 8 / hi**3, 3 / 8 / hi**5
    q, r = (3 * lo + hi) / 4, (lo + 3 * hi) / 4
    error = None
    for _ in range(100):
        x = np.array([lo, q, r, hi])
        system = np.stack([x, x**3, x**5, np.array([1.0, -1.0, 1.0, -1.0])], axis=1)
        a, b, c, e = np.linalg.solve(system, np.ones(4))
        roots = (-3 * b + np.array([-1.0, 1.0]) * math.sqrt(9 * b * b - 20 * a * c)) / (10 * c)
        q, r = np.sqrt(roots)
        if error is not None and abs(e - error) < 1e-15:
            break
        error = e
    return float(a), float(b), float(c)


def polar_express_recipe(low, iterations, cushion):
    """The greedy schedule: at each iteration the minimax quintic for the current interval
    ``[l, u]`` (fitted on ``[max(l, cushion u), u]``, then rescaled to equioscillate on
    ``[l, u]``), after which the interval becomes ``[p(l), 2 - p(l)]``."""
    lo, hi, out = low, 1.0, []
    for _ in range(iterations):
        a, b, c = minimax_quintic(max(lo, cushion * hi), hi)
        if cushion * hi > lo:
            def p(x):
                return a * x + b * x**3 + c * x**5
            scale = 2 / (p(lo) + p(hi))
            a, b, c = a * scale, b * scale, c * scale
        out.append((a, b, c))
        lo = a * lo + b * lo**3 + c * lo**5
        hi = 2 - lo
    return out, lo


def compose(coefficients, x, margin=1.0):
    y = x / margin
    for a, b, c in coefficients:
        y = a * y + b * y**3 + c * y**5
    return y


GRID = np.unique(np.concatenate([np.geomspace(LOW, 1.0, 100001), np.linspace(LOW, 1.0, 100001)]))


def test_published_quintics_are_the_greedy_minimax_schedule():
    """Our own Remez solver, run on the paper's recipe, gives the eight published quintics
    (the eighth is published as the limit (15/8, -10/8, 3/8), which the recipe approaches)."""
    recomputed, _ = polar_express_recipe(LOW, 8, CUSHION)
    assert np.allclose(np.array(recomputed[:7]), np.array(POLAR_EXPRESS_MINIMAX[:7]), rtol=1e-9, atol=0)
    assert np.allclose(recomputed[7], POLAR_EXPRESS_MINIMAX[7], rtol=1e-8, atol=0)
    assert POLAR_EXPRESS_MINIMAX[7] == (15 / 8, -10 / 8, 3 / 8)


def test_five_minimax_steps_equioscillate_on_the_guaranteed_interval():
    """The paper's guarantee: T greedy minimax steps map [l, 1] into [l_T, 2 - l_T], and the
    worst case reaches both ends (for T = 5: [0.876, 1.124])."""
    _, l5 = polar_express_recipe(LOW, 5, CUSHION)
    y = compose(POLAR_EXPRESS_MINIMAX[:5], GRID)
    assert 0.8764 < l5 < 0.8765
    assert y.min() >= l5 - 1e-9 and y.max() <= 2 - l5 + 1e-9
    assert y.min() < l5 + 1e-6 and y.max() > 2 - l5 - 1e-6  # both ends are reached


def test_polar_express_as_run_stays_in_its_interval():
    """With the safety factor (every quintic but the last at s/1.01, and the start divided by
    1.01) the lower end drops to the safety-tracked recursion and the upper end stays below
    2 - l_5: five steps map [1e-3, 1] into [0.840, 1.124], six into [0.9934, 1.0012]."""
    _, l5 = polar_express_recipe(LOW, 5, CUSHION)
    s = torch.from_numpy(GRID)
    y5 = newton_schulz_map(s, 5, "polar_express")
    low = LOW / POLAR_EXPRESS_SAFETY
    for a, b, c in newton_schulz_schedule("polar_express", 5).coefficients:
        low = a * low + b * low**3 + c * low**5  # the map rises on [0, 1e-3]: the worst case is l
    assert y5.min().item() == pytest.approx(low, rel=1e-6)
    assert 0.840 <= y5.min().item() <= 0.841 and 1.1235 <= y5.max().item() <= 2 - l5 + 1e-9
    y6 = newton_schulz_map(s, 6, "polar_express")
    assert 0.9934 <= y6.min().item() and y6.max().item() <= 1.0012
    # Jordan's quintic after 5 steps, on the same interval, for contrast: [0.47, 1.20]
    yj = newton_schulz_map(s, 5, "jordan")
    assert yj.min().item() < 0.48 and yj.max().item() > 1.2


def test_safety_factor_is_the_published_one():
    schedule = newton_schulz_schedule("polar_express", 8)
    assert schedule.margin == POLAR_EXPRESS_SAFETY == 1.01
    for (a, b, c), (a0, b0, c0) in zip(schedule.coefficients[:7], POLAR_EXPRESS_MINIMAX[:7]):
        assert (a, b, c) == pytest.approx((a0 / 1.01, b0 / 1.01**3, c0 / 1.01**5), rel=1e-15)
    assert schedule.coefficients[7] == POLAR_EXPRESS_MINIMAX[7] == (1.875, -1.25, 0.375)


# ----------------------------------------------------------------------------- against an SVD
def spread_matrix(seed, n=64, m=64, low=1e-3, dtype=F64):
    """``M = U diag(s) V^T`` with ``s`` log-spaced over [low, 1], and its polar factor."""
    g = torch.Generator().manual_seed(seed)
    U = linalg.random_orthogonal(n, g)
    V = linalg.random_orthogonal(m, g)[:, :n]
    s = torch.logspace(0, math.log10(low), n, dtype=F64)
    return ((U * s) @ V.T).to(dtype), U @ V.T


def polar_error(X, O):
    """``||X - U V^T||_F / sqrt(rank)``: the RMS distance of the singular values from 1."""
    return (torch.linalg.matrix_norm(X.to(F64) - O) / math.sqrt(min(O.shape[-2:]))).item()


@pytest.mark.parametrize("seed, n, m", [(0, 64, 64), (1, 48, 96), (2, 96, 48)])
def test_polar_express_error_falls_with_steps_and_beats_jordan(seed, n, m):
    M, O = spread_matrix(seed, min(n, m), max(n, m))
    if n > m:
        M, O = M.T, O.T
    pe = [polar_error(msign_newton_schulz(M, k, "polar_express"), O) for k in range(1, 10)]
    jordan = [polar_error(msign_newton_schulz(M, k, "jordan"), O) for k in range(1, 10)]
    assert all(x > y for x, y in zip(pe, pe[1:])), pe  # strictly decreasing
    assert pe[-1] < 1e-6  # and it converges, which Jordan's quintic does not
    assert min(jordan) > 0.15
    for k in range(4, 10):  # from 4 steps on, better at equal steps (at 3 the two are close)
        assert pe[k - 1] < jordan[k - 1], (k, pe, jordan)


def test_cubic_falls_slowly_from_small_singular_values():
    M, O = spread_matrix(3)
    cubic = [polar_error(msign_newton_schulz(M, k, "cubic"), O) for k in (1, 3, 5, 7)]
    assert all(x > y for x, y in zip(cubic, cubic[1:])) and cubic[-1] > 0.5


@pytest.mark.parametrize("coefficients", ["jordan", "cubic", "polar_express", QUINTIC, [CUBIC, QUINTIC]])
def test_the_map_gives_the_singular_values_of_the_iteration(coefficients):
    g = torch.Generator().manual_seed(5)
    M = torch.randn(7, 11, generator=g, dtype=F64) @ torch.diag(torch.logspace(0, -2, 11, dtype=F64))
    U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    for steps in (0, 1, 3, 5, 9):
        mapped = newton_schulz_map(S / (S.norm() + 1e-7), steps, coefficients)
        expected = (U * mapped) @ Vh
        assert torch.allclose(msign_newton_schulz(M, steps, coefficients), expected, atol=1e-9)


def test_batched_polar_express_equals_a_loop_and_tall_inputs_transpose():
    g = torch.Generator().manual_seed(6)
    M = torch.randn(3, 2, 12, 7, generator=g, dtype=F64)
    out = msign_newton_schulz(M, 5, "polar_express")
    assert out.shape == M.shape
    for i in range(3):
        for j in range(2):
            assert torch.allclose(out[i, j], msign_newton_schulz(M[i, j], 5, "polar_express"), atol=1e-12)
            assert torch.allclose(out[i, j].T, msign_newton_schulz(M[i, j].T, 5, "polar_express"), atol=1e-12)


@pytest.mark.parametrize("coefficients", ["jordan", "polar_express"])
def test_bfloat16_inputs_and_compute(coefficients):
    """bf16 in, bf16 out (computed in bf16); and float32 in, computed in bf16, float32 out:
    finite, within bf16 rounding of the float64 iteration."""
    M, _ = spread_matrix(7, 32, 48, low=1e-2)
    reference = msign_newton_schulz(M, 5, coefficients)
    out = msign_newton_schulz(M.to(torch.bfloat16), 5, coefficients)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    mixed = msign_newton_schulz(M.float(), 5, coefficients, compute_dtype=torch.bfloat16)
    assert mixed.dtype == torch.float32
    for X in (out, mixed):
        assert polar_error(X, reference) < 0.05
        assert torch.linalg.svdvals(X.to(F64)).max().item() < 1.2


# ----------------------------------------------------------------------------- the option
def test_named_schedules_equal_their_triples_bitwise():
    g = torch.Generator().manual_seed(8)
    M = torch.randn(20, 30, generator=g)
    assert torch.equal(msign_newton_schulz(M, 5, "jordan"), msign_newton_schulz(M))
    assert torch.equal(msign_newton_schulz(M, 5, [QUINTIC] * 5), msign_newton_schulz(M))
    assert torch.equal(msign_newton_schulz(M, 4, "cubic"), msign_newton_schulz(M, 4, CUBIC))


def test_a_sequence_repeats_its_last_triple():
    s = newton_schulz_schedule([CUBIC, QUINTIC], 4)
    assert s.coefficients == (CUBIC, QUINTIC, QUINTIC, QUINTIC) and s.margin == 1.0
    assert newton_schulz_schedule("polar_express", 10).coefficients[7:] == ((1.875, -1.25, 0.375),) * 3
    assert newton_schulz_schedule("polar_express", 0).coefficients == ()
    assert newton_schulz_schedule(torch.tensor(QUINTIC), 2).coefficients == (
        tuple(float(v) for v in torch.tensor(QUINTIC)),) * 2


@pytest.mark.parametrize(
    "value, shown",
    [
        ("abc", "'abc'"),
        ((1.0, 2.0), "(1.0, 2.0)"),
        ([(1.0, 2.0, 3.0), (1.0, 2.0)], "(1.0, 2.0)"),
        ([], "[]"),
        (5, "5"),
        ((float("nan"), 1.0, 1.0), "nan"),
        ([QUINTIC, (1.0, float("inf"), 0.0)], "inf"),
        ((True, 1.0, 1.0), "True"),
    ],
)
def test_bad_coefficients_are_named_in_the_error(value, shown):
    with pytest.raises(ValueError, match="coefficients") as info:
        msign_newton_schulz(torch.ones(3, 3), 5, value)
    assert shown in str(info.value)
    with pytest.raises(ValueError, match="ns_coefficients"):
        newton_schulz_schedule(value, 5, name="ns_coefficients")
    with pytest.raises(ValueError, match="coefficients"):
        newton_schulz_map(torch.ones(3), 5, value)


def test_a_resolved_schedule_is_accepted_and_checked():
    g = torch.Generator().manual_seed(9)
    M = torch.randn(6, 9, generator=g, dtype=F64)
    resolved = newton_schulz_schedule("polar_express", 5)
    assert torch.equal(msign_newton_schulz(M, 5, resolved), msign_newton_schulz(M, 5, "polar_express"))
    # the same polynomials without the margin: the start is not divided by 1.01
    plain = linalg.NewtonSchulzSchedule(resolved.coefficients)
    assert not torch.allclose(msign_newton_schulz(M, 5, plain), msign_newton_schulz(M, 5, resolved))
    for bad in (linalg.NewtonSchulzSchedule((QUINTIC,), 0.0), linalg.NewtonSchulzSchedule(()),
                linalg.NewtonSchulzSchedule(((1.0, 2.0),))):
        with pytest.raises(ValueError, match="coefficients"):
            msign_newton_schulz(M, 5, bad)


def test_the_error_lists_the_names():
    with pytest.raises(ValueError, match="'jordan', 'cubic', 'polar_express'"):
        newton_schulz_schedule("Polar Express", 5)
