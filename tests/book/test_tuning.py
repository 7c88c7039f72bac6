"""The tuning protocol (v2): the same trials for every optimizer counted as run, a stability rule,
held-out seeds, order-statistic intervals, paired differences, schedules, the expected loss."""

import math

import numpy as np
import pytest
import torch

from isolab.book.engine import DEFAULTS, evaluate, sweep, trial_grid, tune
from isolab.book.engine.intervals import coverage, median_interval, order_ranks, paired_difference
from isolab.book.engine.schedules import check_schedule, multiplier, multipliers
from isolab.book.engine.tuning import metric_kwargs, refine_grid, rung_steps, scores, tail_steps
from isolab.book.problems import DeepLinearRegression, GaussianFeatures

SMALL = DeepLinearRegression(n=6, depth=2, batch=12)
F64 = torch.float64


def test_the_trials_are_shared_between_knobs_and_learning_rates():
    alone = trial_grid({}, 24, (1e-3, 1e0))
    with_momentum = trial_grid({"momentum": [0.0, 0.9, 0.95]}, 24, (1e-3, 1e0))
    assert len(alone) == len(with_momentum) == 24
    assert len({t.lr for t in alone}) == 24 and len({t.lr for t in with_momentum}) == 8
    assert {t.hyper["momentum"] for t in with_momentum} == {0.0, 0.9, 0.95}
    assert min(t.lr for t in alone) == pytest.approx(1e-3) and max(t.lr for t in alone) == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(knobs={"momentum": [0, 0.5, 0.9], "nesterov": [False, True]}, budget=12), "leaves 2 learning rates"),
    (dict(knobs={}, budget=2), "budget must be an int >= 3, got 2"),
    (dict(knobs={}, budget=12, lr_range=(1.0, 0.1)), "0 < low < high, got \\(1.0, 0.1\\)"),
    (dict(knobs={"momentum": []}, budget=12), "knob 'momentum' has no values"),
])
def test_trial_grid_errors_name_what_was_passed(kwargs, match):
    kwargs = {"lr_range": (1e-3, 1.0), **kwargs}
    with pytest.raises(ValueError, match=match):
        trial_grid(**kwargs)


def test_every_optimizer_runs_exactly_coarse_plus_refine_configurations():
    t = tune(SMALL, "sgd", 30, coarse=12, refine=4, lr_range=(1e-3, 3.0), knobs={"momentum": [0.0, 0.9]},
             tuning_seeds=(0, 1, 2), dtype=F64)
    assert set(t.hyper) == set(DEFAULTS["sgd"]), "every hyperparameter by name"
    assert len(t.trials) == t.budget == 16 and (t.coarse, t.refine) == (12, 4)
    assert len({h["momentum"] for h, _, _ in t.trials[12:]}) == 1, "the refine phase keeps the coarse winner's knobs"
    assert t.score == min(s for _, _, s in t.trials)            # no halving: every trial ran all 30 steps
    # the choice is the median over the tuning seeds of the engine's own scores
    s = sweep(SMALL, "sgd", [t.lr], 30, seeds=(0, 1, 2), hyper=t.hyper, dtype=F64, progress=False,
              **metric_kwargs("tail_expected_loss", 30))
    assert np.median(scores(s, "tail_expected_loss")[:, 0]) == pytest.approx(t.score, rel=1e-12)
    with pytest.raises(ValueError, match="multiple of the 2 knob combinations"):
        tune(SMALL, "sgd", 30, coarse=9, refine=4, lr_range=(1e-3, 3.0), knobs={"momentum": [0.0, 0.9]})
    with pytest.raises(ValueError, match="refine must be an even int"):
        tune(SMALL, "sgd", 30, coarse=6, refine=3, lr_range=(1e-3, 3.0))


def test_the_refine_phase_looks_between_the_coarse_neighbours_and_past_an_edge():
    coarse = list(np.logspace(-3, 0, 4))
    inside = refine_grid(coarse[1], coarse, 4)
    assert len(inside) == 4 and coarse[0] < min(inside) and max(inside) < coarse[2] and coarse[1] not in inside
    past = refine_grid(coarse[-1], coarse, 4)
    assert max(past) > coarse[-1], "a winner at the top edge is looked past"
    low = tune(SMALL, "sgd", 20, coarse=6, refine=4, lr_range=(1e-5, 1e-4), dtype=F64)
    assert low.lr > 1e-4 and not low.interior, "too small a range: the refine phase goes past its top"


def test_a_configuration_that_diverges_on_any_tuning_seed_is_out(monkeypatch):
    from isolab.book.engine import tuning

    def fake_run(problem, optimizer, hyper, lrs, steps, seeds, metric, threshold, sweep_kw):
        lrs = np.asarray(lrs)
        out = np.tile(1.0 / lrs, (len(seeds), 1))   # faster at larger rates ...
        out[-1, lrs > 0.1] = np.inf                  # ... but above 0.1 one seed of five diverges
        return out

    monkeypatch.setattr(tuning, "_run", fake_run)
    t = tune(SMALL, "sgd", 10, coarse=9, refine=2, lr_range=(1e-3, 1.0), tuning_seeds=(0, 1, 2, 3, 4))
    assert t.lr <= 0.1 and math.isfinite(t.score)
    assert all(s == math.inf for _, lr, s in t.trials if lr > 0.1), "the median of four good seeds does not save it"
    with pytest.raises(RuntimeError, match="every trial over lr .* diverged on some tuning seed"):
        tune(SMALL, "sgd", 10, coarse=3, refine=0, lr_range=(0.2, 1.0), tuning_seeds=(0, 1, 2, 3, 4))


def test_successive_halving_within_each_phase_and_the_choice_is_the_best_full_length_trial():
    t = tune(SMALL, "sgd", 27, coarse=18, refine=6, lr_range=(1e-3, 3.0), knobs={"momentum": [0.0, 0.9]},
             halving=3, rungs=3, dtype=F64)
    assert [(r["phase"], r["steps"]) for r in t.rungs] == [("coarse", 3), ("coarse", 9), ("coarse", 27),
                                                          ("refine", 3), ("refine", 9), ("refine", 27)]
    coarse = [r for r in t.rungs if r["phase"] == "coarse"]
    assert [len(r["trials"]) - r["backfilled"] for r in coarse] == [18, 6, 2], "promoted: the best third"
    assert len(t.trials) == 24, "every configuration recorded once, with its score at the last rung it reached"
    for rungs in (coarse, [r for r in t.rungs if r["phase"] == "refine"]):
        for before, after in zip(rungs, rungs[1:]):
            ranked = sorted(s for _, _, s in before["trials"])
            kept = [before["trials"][i] for i in before["kept"]]
            assert sorted(s for _, _, s in kept) == ranked[:len(kept)]
            assert [(h, lr) for h, lr, _ in kept] == [(h, lr) for h, lr, _ in after["trials"][:len(kept)]]
    full = [s for r in t.rungs if r["steps"] == 27 for _, _, s in r["trials"]]
    assert t.score == min(full) and t.halving == 3
    assert t.as_dict()["rungs"][0] == {**t.as_dict()["rungs"][0], "phase": "coarse", "steps": 3}


def test_a_promoted_rate_that_diverges_later_is_replaced_by_the_next_best(monkeypatch):
    """Successive halving at the edge of stability: the largest rates win the short rung and
    blow up in the long one; the next best of the short rung take their places (back-fill:
    configurations already tried, run longer; the count of configurations does not grow)."""
    from isolab.book.engine import tuning

    def fake_run(problem, optimizer, hyper, lrs, steps, seeds, metric, threshold, sweep_kw):
        lrs = np.asarray(lrs)
        score = np.where((lrs > 0.1) & (steps > 30), np.inf, 1.0 / lrs)
        return np.tile(score, (len(seeds), 1))

    monkeypatch.setattr(tuning, "_run", fake_run)
    t = tune(SMALL, "sgd", 90, coarse=9, refine=0, lr_range=(1e-3, 1.0), halving=3, rungs=2)
    short, long = t.rungs
    assert long["backfilled"] >= 1 and t.lr <= 0.1 and math.isfinite(t.score) and t.interior
    assert len(t.trials) == 9 and sum(len(r["trials"]) for r in t.rungs) == 9 + 3 + long["backfilled"]


def test_metrics_record_what_they_need_and_score_the_exact_expected_loss():
    assert metric_kwargs("tail_expected_loss", 100) == {"expected_loss_from": 90}
    assert tail_steps(1000) == 900 and tail_steps(5) == 4
    with pytest.raises(ValueError, match="needs a threshold"):
        metric_kwargs("iterations_expected", 100)
    s = sweep(SMALL, "adam", [1e-2], 50, seeds=(0, 1), dtype=F64, progress=False, expected_loss_from=45)
    tail = scores(s, "tail_expected_loss")
    np.testing.assert_allclose(tail[:, 0], s.expected_loss[:, 0, 45:].mean(-1), rtol=1e-14)
    assert np.isnan(s.expected_loss[:, 0, :45]).all()
    t = tune(SMALL, "adam", 200, coarse=6, refine=2, lr_range=(1e-3, 3e-1), metric="iterations_expected",
             threshold=0.1, dtype=F64)
    assert math.isfinite(t.score) and t.score <= 200


def test_the_expected_loss_is_the_mean_batch_loss_of_a_fixed_network():
    """tr((P - M)^T Sigma (P - M)) / n against the average loss of 4000 batches (x ~ N(0, Sigma))."""
    problem = DeepLinearRegression(n=4, depth=2, batch=50, features=GaussianFeatures(4, 10.0, 0.4))
    W = problem.initial_weights(3)
    P = W[0] @ W[1]
    exact = problem.expected_loss(P, seed=3).item()
    batches = [problem.batch(t, 3) for t in range(4000)]
    mean = np.mean([problem.loss((X @ P).unsqueeze(0), T.unsqueeze(0)).item() for X, T in batches])
    assert mean == pytest.approx(exact, rel=0.03)
    s = sweep(problem, "sgd", [0.0], 0, seeds=(3,), dtype=F64, progress=False, expected_loss_from=0)
    assert s.expected_loss[0, 0, 0] == pytest.approx(exact, rel=1e-12)
    with pytest.raises(ValueError, match="has no expected loss"):
        from isolab.book.problems import PureNoise
        PureNoise().expected_loss(P, 0)


def test_held_out_seeds_are_enforced_and_scored_with_the_schedule():
    schedule = {"warmup": 0.1, "decay": "cosine"}
    t = tune(SMALL, "adam", 25, coarse=6, refine=2, lr_range=(1e-3, 3e-1), tuning_seeds=(0, 1), schedule=schedule,
             dtype=F64)
    assert t.schedule == schedule and t.as_dict()["schedule"] == schedule
    with pytest.raises(ValueError, match=r"seeds \[1\] were used to tune adam"):
        evaluate(SMALL, t, seeds=(1, 2, 3))
    held = evaluate(SMALL, t, seeds=(2, 3, 4), dtype=F64)
    direct = sweep(SMALL, "adam", [t.lr], 25, seeds=(2, 3, 4), hyper=t.hyper, dtype=F64, progress=False,
                   schedule=schedule, expected_loss_from=tail_steps(25))
    np.testing.assert_array_equal(held, scores(direct, "tail_expected_loss")[:, 0])


def test_knob_names_are_checked_before_any_training():
    with pytest.raises(ValueError, match="unknown hyperparameter 'momentum'"):
        tune(SMALL, "adam", 5, coarse=6, refine=0, lr_range=(1e-3, 1e-1), knobs={"momentum": [0.0, 0.9]})
    with pytest.raises(ValueError, match="both tuned"):
        tune(SMALL, "sgd", 5, coarse=3, refine=0, lr_range=(1e-3, 1e-1), knobs={"momentum": [0.0]},
             fixed={"momentum": 0.9})


def test_rung_lengths_of_successive_halving():
    assert rung_steps(900, None, 3) == [900]
    assert rung_steps(900, 3, 3) == [100, 300, 900]
    assert rung_steps(10, 3, 3) == [2, 4, 10]
    assert rung_steps(2, 3, 4) == [1, 2], "repeated lengths are merged"


@pytest.mark.parametrize("kwargs,match", [(dict(halving=1), "halving"), (dict(halving=3, rungs=1), "rungs")])
def test_halving_arguments_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tune(SMALL, "sgd", 9, coarse=6, refine=0, lr_range=(1e-3, 1.0), **kwargs)


def test_knobs_may_be_listed_as_combinations_that_go_together():
    combos = [{"momentum": 0.0, "nesterov": False}, {"momentum": 0.9, "nesterov": True}]
    grid = trial_grid(combos, 12, (1e-3, 1.0))
    assert len(grid) == 12 and [t.hyper for t in grid[::6]] == combos
    t = tune(SMALL, "sgd", 10, coarse=6, refine=2, lr_range=(1e-3, 1.0), knobs=combos, dtype=F64)
    assert {(h["momentum"], h["nesterov"]) for h, _, _ in t.trials[:6]} == {(0.0, False), (0.9, True)}
    with pytest.raises(ValueError, match="same hyperparameters"):
        trial_grid([{"momentum": 0.0}, {"nesterov": True}], 12, (1e-3, 1.0))
    with pytest.raises(ValueError, match="nesterov=True needs momentum"):  # checked before any training
        tune(SMALL, "sgd", 10, coarse=6, refine=0, lr_range=(1e-3, 1.0),
             knobs={"momentum": [0.9, 0.0], "nesterov": [True]})


# --- intervals ---------------------------------------------------------------------------
def test_the_median_interval_is_the_order_statistics_with_their_exact_coverage():
    assert order_ranks(20, 0.9) == (6, coverage(20, 6)) and coverage(20, 6) == pytest.approx(0.95861, abs=1e-5)
    assert order_ranks(5, 0.9) == (1, 0.9375), "five seeds: only [min, max] reaches 90 %"
    assert order_ranks(3, 0.9) == (1, 0.75), "three seeds: [min, max] covers the median 75 % of the time"
    x = np.arange(20.0)[::-1]
    iv = median_interval(x, 0.9)
    assert (iv.low, iv.high, iv.median, iv.ranks) == (5.0, 14.0, 9.5, (6, 15))
    assert iv.label() == "95.9 % interval (ranks 6 and 15 of 20)"
    assert median_interval([1.0, 2.0, math.inf, 3.0, math.inf]).high == math.inf, "a diverged seed is the worst"
    with pytest.raises(ValueError, match="at least 2"):
        median_interval([1.0])
    with pytest.raises(ValueError, match="NaN"):
        median_interval([1.0, float("nan")])


def test_the_coverage_is_what_a_simulation_finds():
    rng = np.random.default_rng(1)
    x = np.sort(rng.standard_normal((40_000, 20)), axis=1)
    covered = np.mean((x[:, 5] <= 0) & (x[:, 14] >= 0))
    assert covered == pytest.approx(coverage(20, 6), abs=0.005)


def test_paired_differences_tie_two_divergences_and_rank_only_when_the_interval_excludes_zero():
    a = [1.0, 2.0, math.inf, 3.0, 4.0]
    b = [2.0, 3.0, math.inf, 4.0, math.inf]
    d = paired_difference(a, b)
    assert (d.median, d.low, d.high) == (-1.0, -math.inf, 0.0) and not d.excludes_zero()
    better = paired_difference(np.arange(20.0), np.arange(20.0) + 1.0)
    assert better.excludes_zero() and better.high == -1.0
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference([1.0, 2.0], [1.0, 2.0, 3.0])


# --- schedules ---------------------------------------------------------------------------
def test_warmup_then_cosine_or_linear_decay():
    cos = multipliers({"warmup": 0.1, "decay": "cosine"}, 100)
    assert cos[0] == pytest.approx(0.1) and cos[9] == pytest.approx(1.0) and 0 < cos[-1] < 1e-3
    assert all(a >= b for a, b in zip(cos[9:], cos[10:])), "decays after the warmup"
    lin = multipliers({"warmup": 0.0, "decay": "linear"}, 10)
    assert lin[0] == pytest.approx(10 / 11) and lin[-1] == pytest.approx(1 / 11), "the last update still moves"
    assert multiplier(None, 5, 10) == 1.0 and multipliers({"warmup": 0.2, "decay": "constant"}, 5)[-1] == 1.0
    for bad in ({"warmup": 1.0, "decay": "cosine"}, {"warmup": 0.1, "decay": "step"}, {"warmup": 0.1}):
        with pytest.raises(ValueError, match="schedule"):
            check_schedule(bad)


def test_a_scheduled_sweep_is_the_schedule_applied_by_hand():
    """Adam with a schedule in the engine equals torch.optim.Adam with LambdaLR (float64)."""
    schedule = {"warmup": 0.2, "decay": "cosine"}
    s = sweep(SMALL, "adam", [0.05], 10, seeds=(0,), dtype=F64, progress=False, schedule=schedule)
    model = SMALL.reference_model(SMALL.initial_weights(0))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: multiplier(schedule, t, 10))
    losses = []
    for t in range(11):
        X, T = SMALL.batch(t, 0)
        loss = SMALL.reference_loss(model(X), T)
        losses.append(loss.item())
        if t == 10:
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    np.testing.assert_allclose(s.loss[0, 0], losses, rtol=1e-9)
    prefix = sweep(SMALL, "adam", [0.05], 4, seeds=(0,), dtype=F64, progress=False, schedule=schedule,
                   schedule_steps=10)
    np.testing.assert_allclose(prefix.loss[0, 0], s.loss[0, 0, :5], rtol=1e-12)


def test_tune_lr_searches_any_run_with_the_same_trials_and_the_stability_rule():
    from isolab.book.engine.tuning import tune_lr

    calls = []

    def evaluate(lr, seed):
        calls.append((lr, seed))
        if lr > 0.05 and seed == 4:
            return float("nan")                    # one seed of five diverges above 0.05
        return (math.log10(lr) + 1.7) ** 2 + 0.01 * seed

    out = tune_lr(evaluate, coarse=6, refine=4, lr_range=(1e-3, 1e-1))
    assert len(out["trials"]) == 10 and len(calls) == 50 and out["interior"]
    assert 10 ** -1.7 / 1.5 < out["lr"] < 10 ** -1.7 * 1.5
    assert all(s == math.inf for lr, s in out["trials"] if lr > 0.05)
    with pytest.raises(RuntimeError, match="diverged on some tuning seed"):
        tune_lr(lambda lr, seed: math.inf, coarse=3, refine=0, lr_range=(1e-3, 1e-1))


# ----------------------------------------------------------------------------- protocol version 3
def test_the_protocol_page_states_the_protocol_the_code_enforces():
    """book/protocol.md and isolab.book.engine.tuning.PROTOCOL say the same thing."""
    from pathlib import Path

    from isolab.book.engine.tuning import PROTOCOL, TUNED_KNOBS

    text = (Path(__file__).resolve().parents[2] / "book" / "protocol.md").read_text()
    page = text.replace("\n", " ")
    assert "version 3.1" in page and PROTOCOL["version"] == 3.1
    assert f"{PROTOCOL['coarse']} + {PROTOCOL['refine']}" in page
    assert r"[c/6,\,6c]" in page and PROTOCOL["range_factor"] == 6.0
    assert r"from $10^{-6}$ to $10$" in page and PROTOCOL["pilot"]["span"] == (1e-6, 1e1)
    assert "two learning rates per decade" in page and PROTOCOL["pilot"]["per_decade"] == 2
    assert "at each of its momentum values" in page.replace("\n", " ") and PROTOCOL["pilot"]["per_momentum"]
    assert r"$\{0, 0.9, 0.95\}$" in page and PROTOCOL["momenta"] == (0.0, 0.9, 0.95)
    assert r"$\times\{0.1, 1, 10\}$" in page and PROTOCOL["damping_spread"] == (0.1, 1.0, 10.0)
    assert "five\ntuning seeds" in page or "five tuning seeds" in page.replace("\n", " ")
    assert len(PROTOCOL["tuning_seeds"]) == 5 and len(PROTOCOL["heldout_seeds"]) == len(PROTOCOL["fresh_seeds"]) == 20
    assert "No minimum effect" in page or "no minimum effect" in page.replace("\n", " ")
    assert PROTOCOL["min_effect"] == 0.0
    # the knob table: one row per optimizer, the damping column filled exactly where the code tunes one
    rows = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in text.splitlines()
            if line.startswith("| ") and line.count("|") == 4}
    names = {"SGD": "sgd", "SignSGD": "signsgd", "Adam": "adam", "Muon": "muon", "SOAP": "soap",
             "Shampoo (2018)": "shampoo", "Shampoo, grafted": "shampoo_graft", "K-FAC": "kfac", "Iso": "iso",
             "IsoAdam": "isoadam"}
    for label, name in names.items():
        assert (rows[label] != "—") == (TUNED_KNOBS[name][1] is not None), label


def test_knob_grids_tune_every_knob_and_each_momentum_takes_its_pilots_range():
    from isolab.book.engine.defaults import library_defaults
    from isolab.book.engine.tuning import (PROTOCOL, TUNED_KNOBS, check_entry, knob_grid, lr_scale, momentum_of,
                                           trial_grid, with_momentum)

    for name in TUNED_KNOBS:
        base = {**DEFAULTS[name], **library_defaults(name)}
        combos = knob_grid(name, base)
        check_entry(name, combos, PROTOCOL["coarse"] + PROTOCOL["refine"])
        assert len(combos) in (3, 9) and PROTOCOL["coarse"] % len(combos) == 0
    with pytest.raises(ValueError, match="tunes"):
        check_entry("iso", [{"momentum": m} for m in PROTOCOL["momenta"]], 66)
    with pytest.raises(ValueError, match="trials ran"):
        check_entry("muon", knob_grid("muon", DEFAULTS["muon"]), 48)
    centres = {0.0: 0.1, 0.9: 0.01, 0.95: 0.005}                # each momentum's pilot centre
    grid = trial_grid(knob_grid("sgd", DEFAULTS["sgd"]), 9, (1.0, 4.0), lambda c: lr_scale("sgd", c, centres))
    assert [t.lr for t in grid if t.hyper["momentum"] == 0.9] == pytest.approx([0.1, 0.2, 0.4])
    assert lr_scale("iso", {"momentum": 0.9}) == 1.0                 # no pilots: no scaling
    assert momentum_of("adam", {"betas": (0.95, 0.999)}) == 0.95
    assert with_momentum("sgd", DEFAULTS["sgd"], 0.9)["nesterov"] and not with_momentum("sgd", DEFAULTS["sgd"], 0.0)["nesterov"]
    assert with_momentum("isoadam", DEFAULTS["isoadam"], 0.0)["betas"] == (0.0, DEFAULTS["isoadam"]["betas"][1])


def test_verdicts_rank_only_where_every_set_agrees_and_thresholds_respect_the_grid():
    from isolab.book.engine.intervals import Interval, against_threshold, ranked

    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 0.959, (6, 15), 20)

    assert ranked([iv(-0.3, -0.1), iv(-0.2, -0.01)]) == "ahead"
    assert ranked([iv(0.1, 0.3), iv(0.05, 0.2)]) == "behind"
    assert ranked([iv(-0.3, -0.1), iv(-0.2, 0.01)]) == "unresolved"   # one set straddles zero
    assert ranked([iv(-0.3, -0.1), iv(0.1, 0.2)]) == "unresolved"     # the sets disagree
    assert against_threshold(2.34, 2.0, 1.23) == "unresolved"          # within one grid step of x2
    assert against_threshold(3.0, 2.0, 1.23) == "fails" and against_threshold(1.2, 2.0, 1.23) == "holds"


def test_a_schedule_may_end_at_a_floor():
    plain = {"warmup": 0.05, "decay": "cosine"}
    assert multipliers({**plain, "floor": 0.0}, 50) == multipliers(plain, 50)   # bitwise
    assert multipliers({**plain, "floor": 1.0}, 40)[2:] == [1.0] * 38
    m = multipliers({**plain, "floor": 0.2}, 100)
    assert min(m[5:]) > 0.2 and m[-1] == pytest.approx(0.2, abs=1e-3)
    with pytest.raises(ValueError, match="floor"):
        check_schedule({**plain, "floor": 1.5})
