"""scripts/run_sweeps.py: Figures 3 and 4 and the reading ablation under Part III's protocol (v3.1).

- the saved results (``results/protocol_*.npz``, full and reduced) follow the protocol:
  every entry ran exactly ``coarse + refine`` configurations (counted from its trial log),
  over exactly the knobs the protocol tunes for its optimizer (momentum for all; damping or
  epsilon where there is one), its lr range centred by the saved shared pilot, which ran at
  the library's defaults (read from the signatures) with the one stated deviation, no weight
  decay; every hyperparameter is named, the setting is the best full-length trial of both phases,
  chosen on the tuning seeds under the stability rule and reported on held-out seeds (>= 20
  at full size) with the order-statistic interval recomputed from the saved per-seed
  scores, the schedule and metric recorded, the run described, and run again on 20 fresh
  seeds with their scores and divergences saved;
- a saved run is **reproduced where it is deterministic**: the first 7 steps of every
  held-out seed, rerun now, match the saved batch losses to 3e-4 relative, under this
  machine's kernels and under three jitters of the draws (:mod:`isolab.book.seeding`), and a
  learning rate 5 % off is told apart from the saved one by the same comparison;
- a saved run's **conclusion** is reproduced with tolerances from the seed spread: rerun on
  its held-out seeds (under a jitter), its median lies inside the window of saved order
  statistics that a fresh sample's median misses with probability < 0.1 % (for 20 seeds
  that is the whole range, ``x_(1)`` to ``x_(20)``), and its count of diverged seeds is
  within what 20 fresh seeds allow;
- the reduced configuration runs end to end through the command line and reaches the same
  conclusions as its saved reference.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from isolab.book.engine import DEFAULTS
from isolab.book.engine.intervals import median_interval
from isolab.book.engine.defaults import library_defaults
from isolab.book.engine.tuning import PROTOCOL, check_entry, knob_grid, rung_steps, scores
from isolab.book.results import load
from isolab.book.seeding import jittered

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("run_sweeps", ROOT / "scripts" / "run_sweeps.py")
rs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rs)

pytestmark = pytest.mark.usefixtures("one_thread")

#: Steps of a saved run compared digit by digit: before float32's rounding differences grow
#: (Chapter 10's checks use the same prefix). Ten steps were too many: Figure 3's Iso, whose
#: chosen rate is 5 % from divergence on held-out seed 14, moves there by 9e-5 at step 9 and
#: 2e-2 at step 10 on an AMD EPYC, against 2e-6 at step 7.
PREFIX = 7
#: Measured on the 40-layer runs: another CPU's kernels and the jitter move the batch loss of
#: SGD, Adam, Muon, K-FAC, Iso and IsoAdam by at most 8e-5 (relative) within 10 steps; a
#: learning rate 5 % off moves it by 7e-4 to 3e-2 within 7 steps.
PREFIX_RTOL = 3e-4
#: Optimizers whose first steps do not amplify rounding. SOAP (eigenvectors of nearly
#: degenerate factors), the 2018 Shampoo (tiny damping) and grafted Shampoo move by 1e-3 to
#: 1e-1 within 10 steps under the jitter, like a learning-rate change, and SignSGD flips the
#: sign of its near-zero gradient entries: their saved runs are checked by their conclusions.
PREFIX_STABLE = ("sgd", "adam", "muon", "kfac", "iso", "isoadam")


def _saved(config, part):
    path = rs.output_path(config, part)
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} not present (run scripts/run_sweeps.py --part {part})")
    return load(path)


def _combos(knobs):
    if isinstance(knobs, list):
        return knobs
    return [dict(zip(knobs, values)) for values in itertools.product(*knobs.values())]


def _plain(v):
    return tuple(v) if isinstance(v, list) else v


@pytest.mark.parametrize("name", ["full", "reduced"])
@pytest.mark.parametrize("part", rs.PARTS)
def test_saved_results_follow_the_protocol(name, part):
    config = rs.FULL if name == "full" else rs.REDUCED
    results = _saved(config, part)
    assert {s.info["run"]["config"]["protocol"] for s in results} == {config["protocol"]}, \
        f"{part}: every entry a run of protocol {config['protocol']}"
    expected = [j["label"] for j in rs.jobs(config, part)]
    assert results.labels == [x for x in expected if x in results.labels], "entries in the script's order"
    tuning = set(config["tuning_seeds"])
    p = config[part]
    trials = rs.trials_of(config, part)
    for s in results:
        t, h, e, run = s.info["tuned"], s.info["heldout"], s.info["entry"], s.info["run"]
        # held-out seeds, disjoint from the five tuning seeds, and enough of them
        assert list(s.seeds) == h["seeds"] == config["heldout_seeds"] and not tuning & set(h["seeds"])
        assert set(t["tuning_seeds"]) == tuning and (name == "reduced" or len(tuning) >= 5)
        if name == "full":
            assert len(h["seeds"]) >= 20
        # the per-seed values are the engine's scores of the saved run; the interval is recomputed
        np.testing.assert_array_equal(scores(s, s.info["metric"])[:, 0], np.asarray(h["scores"]))
        iv = median_interval(h["scores"], config["interval_level"])
        assert iv.as_dict() == {k: h[k] for k in iv.as_dict()}, s.label
        assert h["diverged"] == int(np.isinf(h["scores"]).sum())
        if name == "full":
            assert iv.coverage >= config["interval_level"], "the interval is at least as wide as its label says"
        # the same trials for everyone, counted from what ran (distinct configurations)
        ran = {(tuple(sorted((k, str(v)) for k, v in x["hyper"].items())), x["lr"]) for x in t["trials"]}
        assert len(ran) == len(t["trials"]) == t["budget"] == trials["coarse"] + trials["refine"], s.label
        assert (t["coarse"], t["refine"]) == (trials["coarse"], trials["refine"])
        # every hyperparameter by name; the choice is a knob combination with the fixed ones
        assert set(t["hyper"]) == set(DEFAULTS[s.optimizer]) == set(s.hyper)
        combos = [{k: _plain(v) for k, v in c.items()} for c in _combos(e["knobs"])]
        chosen = {k: _plain(v) for k, v in t["hyper"].items()}
        if part != "ablation":
            assert {k: chosen[k] for k in combos[0]} in combos, f"{s.label}: the choice is a knob combination"
            assert set(combos[0]) | set(e["fixed"]) == set(s.hyper), f"{s.label}: every hyperparameter tuned or fixed"
            # the protocol's knobs, every one tuned, the same trials for all
            check_entry(s.optimizer, e["knobs"], len(t["trials"]), trials["coarse"], trials["refine"])
            base = rs.base(s.optimizer)
            assert combos == [{k: _plain(v) for k, v in c.items()} for c in knob_grid(s.optimizer, base)]
            # the fixed hyperparameters are the library's defaults but for the stated deviation
            lib = library_defaults(s.optimizer)
            for k, v in e["fixed"].items():
                assert s.hyper[k] == _plain(v), (s.label, k)
                if k in lib and k not in rs.DEVIATIONS:
                    assert _plain(v) == _plain(lib[k]), (s.label, k, v, lib[k])
            # each momentum's range is its own pilot's, centred on its best stable rate
            pilots = {float(k): v for k, v in e["pilot"]["pilots"].items()}
            assert sorted(pilots) == list(PROTOCOL["momenta"]) and pilots[min(pilots)]["range"] == e["lr_range"]
            for pl in pilots.values():
                assert pl["centre"] in pl["lrs"] and pl["scores"][pl["lrs"].index(pl["centre"])] == min(pl["scores"])
                assert np.isclose(pl["range"][1] / pl["range"][0], config["pilot"]["range_factor"] ** 2)
        else:
            for k, v in e["fixed"].items():
                assert s.hyper[k] == _plain(v), (s.label, k)
        assert s.lrs[0] == t["lr"] and t["steps"] == e["steps"]
        # the fresh seeds: another 20, disjoint from the others, with their divergences
        f = s.info["fresh"]
        assert f["seeds"] == config["fresh_seeds"] and not set(f["seeds"]) & (tuning | set(h["seeds"]))
        assert f["diverged"] == int(np.isinf(f["scores"]).sum()) == sum(d >= 0 for d in f["diverged_at"])
        assert median_interval(f["scores"], config["interval_level"]).as_dict() == {k: f[k] for k in
                                                                                    ("median", "low", "high",
                                                                                     "coverage", "ranks", "n")}
        # the schedule and the metric of the part, on the held-out run too
        assert t["schedule"] == e["schedule"] == p["schedule"] == s.info["schedule"]
        assert t["metric"] == s.info["metric"] == p["metric"]
        # successive halving inside each phase: each rung keeps the best 1/eta of its trials
        eta = rs.halving_of(config, part)
        lengths = rung_steps(t["steps"], eta, rs._setting(config, part, "rungs"))
        for phase in ("coarse", "refine"):
            rungs = [r for r in t["rungs"] if r["phase"] == phase]
            assert [r["steps"] for r in rungs] == lengths, (s.label, phase)
            for before, after in zip(rungs, rungs[1:]):
                promoted = len(before["trials"]) - before["backfilled"]
                assert len(before["kept"]) == max(1, math.ceil(promoted / eta)) == \
                    len(after["trials"]) - after["backfilled"]
                assert [before["trials"][i]["lr"] for i in before["kept"]] == \
                    [x["lr"] for x in after["trials"][:len(before["kept"])]], "the promoted trials run first"
                ranked = sorted(x["score"] for x in before["trials"])
                assert sorted(before["trials"][i]["score"] for i in before["kept"]) == ranked[:len(before["kept"])]
        # the choice: the best full-length trial of both phases, finite (the stability rule)
        full_length = [x["score"] for r in t["rungs"] if r["steps"] == t["steps"] for x in r["trials"]]
        assert math.isfinite(t["score"]) and t["score"] == min(full_length)
        knob_names = [k for k in (combos[0] if part != "ablation" else {})]
        searched = [x["lr"] for x in t["trials"]
                    if all(_plain(x["hyper"][k]) == _plain(t["hyper"][k]) for k in knob_names)]
        assert t["interior"] == (min(searched) < t["lr"] < max(searched))
        # the run is described
        assert run["command"].startswith("python scripts/run_sweeps.py") and run["part"] == part
        assert run["config"]["heldout_seeds"] == config["heldout_seeds"] and run["config"]["protocol"] == PROTOCOL["version"] == 3.1
        for key in ("torch", "numpy", "cpu", "git_commit"):
            assert key in run["environment"]
        assert run["wall_seconds"] > 0


#: Entries whose chosen rate lies at an end of the rates searched. The protocol keeps them
#: (no grid is moved or rerun) and the chapter discloses each one (Chapter 10, §10.2 and
#: §10.4: K-FAC's rate sits at the top of its range at every budget of Figure 4).
DISCLOSED_AT_AN_EDGE = {"fig4/b500/kfac", "fig4/b1000/kfac", "fig4/b2000/kfac"}


def test_every_entry_at_an_edge_is_disclosed_in_the_full_results():
    """The protocol's edge check, on what the chapter reports: an entry at an edge that the
    chapter does not disclose fails here (a failure names the entry)."""
    at_edge = []
    for part in rs.PARTS:
        path = rs.output_path(rs.FULL, part)
        if path.exists():
            at_edge += [s.label for s in load(path) if not s.info["tuned"]["interior"]]
    assert set(at_edge) <= DISCLOSED_AT_AN_EDGE, f"chosen lr at an edge of every rate searched: {at_edge}"


def _rerun(config, part, s, steps=None, lr_factor=1.0, seeds=None):
    """The saved entry's chosen setting rerun now for ``steps`` (default: its length), with its
    schedule over its full length."""
    t = s.info["tuned"]
    steps = t["steps"] if steps is None else steps
    extra = {} if steps == t["steps"] else {"schedule_steps": t["steps"], "expected_loss_from": None,
                                            "threshold_on": "loss", "threshold": None,
                                            "relative_threshold": False, "retire_at_threshold": False}
    return rs.heldout_run(config, part, s.label, s.optimizer, s.hyper, float(s.lrs[0]) * lr_factor, steps,
                          list(s.seeds if seeds is None else seeds), **extra)


def _prefix_gap(s, run) -> float:
    keep = [i for i, k in enumerate(s.info["loss_steps"]) if k <= PREFIX]
    assert [s.info["loss_steps"][i] for i in keep] == list(range(PREFIX + 1)), "the saved run keeps its first steps"
    return _relative_gap(s.loss[:, 0, keep], run.loss[:, 0, :PREFIX + 1])


def _relative_gap(saved, now) -> float:
    """Largest relative difference where the saved run has a loss (a lane retired at its
    threshold has none after it); a rerun that diverges where the saved one did not is
    infinitely far from it."""
    there = np.isfinite(saved)
    if not np.isfinite(now[there]).all():
        return math.inf
    return float(np.max(np.abs(now[there] / saved[there] - 1.0)))


#: One entry per optimizer family and part: what a change in the engine, a rule, a problem's
#: draws or a saved hyperparameter would move.
PREFIX_CASES = [("fig3", "fig3/iso"), ("fig3", "fig3/muon"), ("fig4", "fig4/b1000/isoadam"), ("fig4", "fig4/b1000/adam"),
                ("fig4", "fig4/b1000/iso"), ("fig4", "fig4/b500/kfac"), ("fig4", "fig4/b2000/sgd"),
                ("ablation", "ablation/iso/placement=update")]


@pytest.mark.parametrize("part,label", PREFIX_CASES)
def test_a_saved_run_reproduces_its_first_steps_on_any_cpu(part, label):
    """Catches any change of the update rules, the engine, the problem's data or initial
    weights, the schedule or the saved setting (a learning rate 5 % off is shown to fail the
    same comparison); tolerates another CPU's rounding (the jitter stands in for it)."""
    results = _saved(rs.FULL, part)
    if label not in results.labels:
        pytest.skip(f"{label} not yet in the saved (partial) results")
    s = results[label]
    for jitter in (None, 1, 2, 3):
        with jittered(1e-6, jitter) if jitter else contextlib.nullcontext():
            gap = _prefix_gap(s, _rerun(rs.FULL, part, s, steps=PREFIX))
        assert gap < PREFIX_RTOL, f"{label}, jitter {jitter}: relative gap {gap:.1e} in the first {PREFIX} steps"
    off = _prefix_gap(s, _rerun(rs.FULL, part, s, steps=PREFIX, lr_factor=1.05))
    assert off > PREFIX_RTOL, f"{label}: a 5 % change of the learning rate moves the prefix by only {off:.1e}"


def _fresh_seed_tolerance(n: int) -> tuple[int, int]:
    """Ranks ``(k, n + 1 - k)`` such that the median of ``n`` fresh seeds falls between the
    saved run's ``x_(k)`` and ``x_(n+1-k)`` with probability > 99.9 % when both come from the
    same distribution (a chaotic run on another CPU is such a fresh draw): found by exact
    counting over the joint order of the two samples."""
    from math import comb

    def p_outside(k):
        # P(median of sample B below x_(k) of sample A), B and A of size n, continuous: the median of
        # B (n even: its lower middle value) lies below x_(k) iff at least n/2 (or (n+1)/2) of B's values
        # fall below A's k-th value; count the interleavings.
        m = (n + 1) // 2
        total = comb(2 * n, n)
        ways = sum(comb(j + k - 1, j) * comb(2 * n - j - k, n - j) for j in range(m, n + 1))
        return ways / total

    k = (n + 1) // 2
    while k > 1 and 2 * p_outside(k) > 1e-3:
        k -= 1
    return k, n + 1 - k


CONCLUSION_CASES = [("fig3", "fig3/isoadam"), ("fig4", "fig4/b1000/iso"), ("fig4", "fig4/b500/soap")]


@pytest.mark.parametrize("part,label", CONCLUSION_CASES)
def test_a_saved_run_reproduces_its_conclusion_on_a_perturbed_cpu(part, label):
    """The whole held-out run again, under a jitter: float32 training of a deep network is
    chaotic, so its digits change, but its median must stay inside the saved seeds' window
    that a fresh set of seeds misses with probability < 0.1 % (for 20 seeds, their whole
    range: the exact count says a narrower window would fail a true run more often), and its number of
    diverged seeds within a binomial allowance. Catches a change that moves the result by more
    than the seed-to-seed spread, which is what the chapter's verdicts rest on."""
    results = _saved(rs.FULL, part)
    if label not in results.labels:
        pytest.skip(f"{label} not yet in the saved (partial) results")
    s = results[label]
    saved = np.sort(np.asarray(s.info["heldout"]["scores"]))
    with jittered(1e-6, 7):
        again = scores(_rerun(rs.FULL, part, s), s.info["metric"])[:, 0]
    lo, hi = _fresh_seed_tolerance(saved.size)
    median = float(np.median(again))
    assert saved[lo - 1] <= median <= saved[hi - 1], (label, median, saved[lo - 1], saved[hi - 1])
    n, d_saved, d_now = saved.size, int(np.isinf(saved).sum()), int(np.isinf(again).sum())
    allowance = max(2, math.ceil(3 * math.sqrt(n * 0.25)))  # 3 sd of a binomial count at its widest
    assert abs(d_now - d_saved) <= allowance, (label, d_saved, d_now)


@pytest.mark.parametrize("part", rs.PARTS)
def test_a_saved_reduced_run_reproduces_its_first_steps(part):
    results = _saved(rs.REDUCED, part)
    # the reduced problem (batch 16 for 8 inputs) makes IsoAdam's whitened entries near zero
    # amplify rounding too (3e-4 to 3e-3 within 5 steps): the rest of the stable optimizers
    stable = [s for s in results if s.optimizer in PREFIX_STABLE and s.optimizer != "isoadam"]
    assert len(stable) >= (4 if part == "ablation" else 5)   # the ablation: Iso's four readings
    for s in stable:
        with jittered(1e-6, 1):
            run = _rerun(rs.REDUCED, part, s, steps=min(rs.REDUCED["thin"]["dense"], s.info["tuned"]["steps"]))
        keep = [i for i, k in enumerate(s.info["loss_steps"]) if k <= run.steps]
        gap = _relative_gap(s.loss[:, 0, keep], run.loss[:, 0, :run.steps + 1])
        assert gap < PREFIX_RTOL, f"{s.label}: relative gap {gap:.1e} in the first {run.steps} steps"


def test_merge_replaces_entries_in_the_scripts_order(tmp_path):
    ref = _saved(rs.REDUCED, "ablation")
    path = tmp_path / "part.npz"
    from isolab.book.results import Results

    Results([ref[x] for x in ref.labels[:3]]).save(path)
    rs.merge(path, Results([ref[ref.labels[5]], ref[ref.labels[1]]]), rs.REDUCED, "ablation")
    assert load(path).labels == [ref.labels[i] for i in (0, 1, 2, 5)]


def test_reduced_configuration_end_to_end_reaches_its_references_conclusions(tmp_path):
    """The command line on the reduced configuration (a few entries of each part), run twice
    into the same folder: the second run resumes (reruns nothing); the setting chosen is
    within one coarse grid step of the saved reference's and the held-out median inside the
    reference's interval (short runs, but float32: the tuning's close calls may differ
    between CPUs)."""
    only = ["fig3/iso", "fig3/sgd", "fig4/b20/iso", "ablation/iso/placement=update"]
    assert rs.main(["--reduced", "--part", "all", "--out-dir", str(tmp_path), "--only", *only]) == 0
    for part in rs.PARTS:
        got = load(tmp_path / (rs.output_path(rs.REDUCED, part).stem + ".only.npz"))
        ref = _saved(rs.REDUCED, part)
        assert sorted(got.labels) == sorted(x for x in only if x.startswith(part))
        for s in got:
            r = ref[s.label]
            t, u = s.info["tuned"], r.info["tuned"]
            lo, hi = r.info["entry"]["lr_range"]
            per_combo = t["coarse"] // len(_combos(r.info["entry"]["knobs"]) or [{}])
            step = math.log(hi / lo) / max(1, per_combo - 1)
            def scale_of(entry, hyper):
                if part == "ablation":
                    return 1.0
                centres = {float(k): v for k, v in entry.info["entry"]["pilot"]["centres"].items()}
                return rs.lr_scale(entry.optimizer, hyper, centres)
            scale = [scale_of(s, t["hyper"]), scale_of(r, u["hyper"])]
            assert abs(math.log(t["lr"] / scale[0] / (u["lr"] / scale[1]))) <= step + 1e-9, (s.label, t["lr"], u["lr"])
            assert r.info["heldout"]["low"] <= s.info["heldout"]["median"] <= r.info["heldout"]["high"], s.label
            assert s.info["run"]["command"].startswith("python scripts/run_sweeps.py --reduced")
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.npz")}
    assert rs.main(["--reduced", "--part", "all", "--out-dir", str(tmp_path), "--only", *only]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.glob("*.npz")} == before, "a finished run is not redone"


def test_the_protocol_gives_every_optimizer_the_same_trials_and_tunes_every_knob():
    """Every optimizer of Figures 3 and 4: the protocol's knobs over the protocol's values,
    the same coarse trials spread over them (at least 6 rates per knob setting), every other
    hyperparameter the library's default but the stated deviation (no weight decay)."""
    for name in rs.OPTIMIZERS:
        opt, knobs, fixed = rs.baseline(name)
        check_entry(name, knobs, PROTOCOL["coarse"] + PROTOCOL["refine"])
        assert rs.FULL["coarse"] % len(knobs) == 0 and rs.FULL["coarse"] // len(knobs) >= 6, name
        lib = library_defaults(name)
        for c in knobs:
            assert set(c) | set(fixed) == set(DEFAULTS[name]), f"{name}: every hyperparameter stated"
        for k, v in fixed.items():
            if k == "weight_decay":
                assert v == 0.0, "no weight decay for anyone"
            elif k in lib:
                assert _plain(v) == _plain(lib[k]), (name, k)
    # the damping or eps of each is searched around the library's default, a decade either side
    for name in ("iso", "isoadam", "shampoo", "shampoo_graft", "kfac", "soap", "adam"):
        _, knobs, _ = rs.baseline(name)
        key = "eps" if name in ("adam", "soap") else "damping"
        default = rs.base(name)[key]
        assert sorted({c[key] for c in knobs}) == pytest.approx([default / 10, default, default * 10]), name
    assert rs.FULL["tuning_seeds"] == list(PROTOCOL["tuning_seeds"]) and len(rs.FULL["heldout_seeds"]) >= 20
    assert not set(rs.FULL["tuning_seeds"]) & set(rs.FULL["heldout_seeds"])
    assert not set(rs.FULL["fresh_seeds"]) & (set(rs.FULL["heldout_seeds"]) | set(rs.FULL["tuning_seeds"]))
    assert sorted(rs.FULL["fig4"]["budgets"]) == [500, 1000, 2000] and rs.FULL["ablation"]["steps"] == 1000
    assert (rs.FULL["n"], rs.FULL["batch"], rs.FULL["fig3"]["depth"], rs.FULL["fig4"]["depth"]) == (32, 128, 5, 40)
    assert rs.FULL["fig4"]["schedule"] == rs.FULL["ablation"]["schedule"] == rs.SCHEDULE
    # the ablation changes one factor of Figure 4's choice at a time
    assert all(len(change) <= 1 for change in rs.VARIANTS.values())
    assert rs.VARIANTS["isoadam/weight_decay=0.01"] == {"weight_decay": library_defaults("isoadam")["weight_decay"]}


def test_the_fresh_seed_window_is_what_it_says():
    """The conclusion test's window, by simulation: two samples of 20 from one distribution."""
    lo, hi = _fresh_seed_tolerance(20)
    rng = np.random.default_rng(0)
    a, b = np.sort(rng.standard_normal((20_000, 20)), axis=1), rng.standard_normal((20_000, 20))
    med = np.median(b, axis=1)
    miss = np.mean((med < a[:, lo - 1]) | (med > a[:, hi - 1]))
    assert 1 <= lo < 10 and miss < 2e-3


def test_bad_part_is_named():
    with pytest.raises(ValueError, match="part must be one of .*'fig5'"):
        rs.jobs(rs.FULL, "fig5")
