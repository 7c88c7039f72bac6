"""Chapter 14's code: the one-layer computation behind the centerpiece (it is the library's Iso,
its step has the length the canonical correlations give), the explorable's promises (and that
they can fail), the reader of the LM benchmark's files (verdicts, the A/A rule for times,
"not yet measured" for what a file lacks), and the figures, with and without the mechanism's
runs."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from isolab.book import correlation_step as C
from isolab.book import lm_bench_results as R
from isolab.book.explorable import Promise, nondecreasing
from isolab.book.figures import ch14

torch.set_num_threads(1)


# ------------------------------------------------------------------ the one-layer computation
def test_the_layer_is_the_librarys_iso_written_out():
    assert C.library_iso_gap(sigma=0.3, rows=64, steps=4) < 1e-12
    assert C.library_iso_gap(sigma=3.0, rows=256, steps=3, lr=2.0) < 1e-12


def test_isos_first_step_is_one_minus_mu_squared_times_the_root_sum_of_squared_correlations():
    for sigma, rows in ((0.1, 64), (3.0, 1024)):
        o = C.outcome(sigma, rows)
        assert o.first_iso == pytest.approx((1 - C.MU ** 2) * math.sqrt((o.rho ** 2).sum()), rel=1e-9)
        assert 0 <= o.rho.min() and o.rho.max() <= 1 + 1e-12
        assert np.all(np.diff(o.rho) <= 1e-12)                       # descending


def test_fixed_length_rules_keep_muons_norm_and_iso_does_not():
    o = C.outcome(1.0, 256)
    for k in (0, 2, 3):
        best = int(np.argmin(o.final[k]))
        assert np.allclose(o.norms[k, best], C.MUON_NORM, rtol=0, atol=1e-9)
    iso = o.norms[1, int(np.argmin(o.final[1]))]
    assert iso.max() < C.MUON_NORM and np.ptp(iso) > 0.1 * iso.max()


def test_the_noise_floor_falls_as_the_rows_grow_and_is_near_nm_over_b():
    """The caption's second slider: more rows, a lower floor (E Σρ² = nm/b for independent data)."""
    floors = [float((C.outcome(1.0, b).floor ** 2).sum()) for b in C.ROWS]
    assert floors[0] > floors[1] > floors[2]
    gen = torch.Generator().manual_seed(5)
    draws = []
    for _ in range(40):
        X = torch.randn(128, 8, generator=gen, dtype=torch.float64)
        G = torch.randn(128, 4, generator=gen, dtype=torch.float64)
        draws.append(float((C.canonical_correlations(X, G, 0.0) ** 2).sum()))
    assert np.mean(draws) == pytest.approx(8 * 4 / 128, rel=0.1)


def test_valley_finds_a_parabolas_vertex_and_stays_between_grid_neighbours():
    x = np.log10(C.LRS)
    losses = np.exp((x + 1.3) ** 2)                   # log loss a parabola with vertex at 10^-1.3
    assert C.valley(losses) == pytest.approx(10 ** -1.3, rel=1e-9)
    losses[:3] = np.inf                               # diverged runs count as the worst
    assert C.valley(losses) == pytest.approx(10 ** -1.3, rel=1e-9)


# ------------------------------------------------------------------ the centerpiece
def test_explorable_keeps_its_promises_and_they_can_fail():
    e = ch14.correlation_step()
    assert e.main == "sigma" and len(e.main_slider.values) >= 9 and e.narrow == "panels"
    assert not e.broken_promises()
    wrong = copy.copy(e)
    wrong.promises = (Promise("Iso's first step shrinks as σ grows", ch14._first, nondecreasing()),)
    assert wrong.broken_promises(), "a promise of growth must fail where the step shrinks"


def test_explorable_draws_three_panels_with_fixed_axes():
    e = ch14.correlation_step()
    limits = set()
    for sigma in (C.SIGMAS[0], C.SIGMAS[-1]):
        fig = e.render(strict=True, sigma=sigma, rows=256)
        assert len(fig.axes) == 3
        limits.add(tuple(tuple(ax.get_xlim()) + tuple(ax.get_ylim()) for ax in fig.axes))
        assert not e.clipped_text(sigma=sigma, rows=256)
    assert len(limits) == 1


# ------------------------------------------------------------------ the benchmark's files
def _cell(a=(0.1, 0.2, 0.3), aa=(0.5, 0.9, 1.0), ratio=(1.2, 1.5, 2.0)):
    iv = lambda m, lo, hi: {"median": m, "low": lo, "high": hi, "coverage": 0.93, "ranks": [2, 7], "n": 8}
    per = {n: {"loss": iv(2.0 + i, 1.9 + i, 2.1 + i), "step_ms": {"median": 10.0, "min": 9.0, "max": 12.0},
               "diverged": 0, "hyper": {"lr": 0.01}} for i, n in enumerate(("muon", "adamw", "adamw2", "iso"))}
    per["adamw2"]["time_ratio_to_adamw"] = iv(aa[1], aa[0], aa[2])
    per["iso"]["time_ratio_to_adamw"] = iv(ratio[1], ratio[0], ratio[2])
    per["muon"]["time_ratio_to_adamw"] = iv(1.0, 0.8, 1.3)
    pairs = {n: {m: iv(0.0, -0.1, 0.1) for m in per if m != n} for n in per}
    pairs["iso"]["muon"] = iv(*a[1:2], a[0], a[2])
    return {"optimizers": per, "paired": pairs, "seeds": list(range(10, 18))}


def test_compare_ranks_only_where_the_interval_excludes_zero():
    cell = _cell()
    assert R.compare(cell, "iso", "muon")["verdict"] == "ranked"
    assert R.compare(cell, "iso", "muon")["ahead"] == "muon"
    assert R.compare(cell, "adamw", "muon")["verdict"] == "unresolved"
    assert R.compare(cell, "iso", "soap") is None


def test_a_time_claim_needs_a_ratio_clear_of_the_aa_interval():
    assert R.time_verdict(_cell(ratio=(1.2, 1.5, 2.0)), "iso") == "slower than AdamW"
    assert R.time_verdict(_cell(ratio=(0.95, 1.5, 2.0)), "iso") == "within the noise"
    assert R.time_verdict(_cell(ratio=(0.2, 0.3, 0.4)), "iso") == "faster than AdamW"
    assert R.time_verdict(_cell(), "muon") == "within the noise"
    assert R.time_verdict(_cell(), "adamw2") == "A/A reference"


def test_the_saved_file_reads_into_tables_that_fit_the_column_and_says_what_is_missing():
    bench = R.load()
    cells = R.cells(bench)
    assert cells and all(s in R.budgets(bench) for _, s in cells)
    for cell in cells.values():
        table = R.ranking_table(cell)
        assert max(map(len, table.splitlines())) <= 88
        assert "(reference)" in table
    text = R.verdict_text(cells, bench)
    missing = [(a, s) for a in R.ARCH_NAMES for s in R.budgets(bench) if (a, s) not in cells]
    assert text.count("Not yet measured") == len(missing)
    rates = R.side_rates(bench)
    assert all("pilot a*" in v for v in rates.values())


def test_a_missing_mechanism_file_is_none_and_makes_no_claim(tmp_path):
    assert R.mechanism(root=tmp_path) is None
    assert R.mechanism_summary(None) is None
    assert R.mechanism_checks(None) == [] and R.isoadam_checks(None) == []
    assert "not yet measured" in R.mechanism_text(None)


@pytest.fixture(scope="module")
def tiny_mechanism():
    """A mechanism file's runs in miniature: Iso's norms with probes, its first steps, two
    seeds and a cost profile, all on the tiny GPT-2."""
    from isolab.book import lm_mechanism as M
    from isolab.book.lm_protocol import load_data

    data = load_data(16, tune_windows=32, test_windows=64)
    h = {"lr": 0.01, "side_lr": 1e-3, "damping": 1e-3}
    runs = {"norms/gpt2/iso/8": {"hyper": h, **M.trace("iso", h, 8, 10, arch="gpt2", size="tiny", data=data,
                                                       probe_every=4)},
            "early/gpt2/iso/as tuned": {"hyper": h, "overrides": {}, **M.trace(
                "iso", h, 8, 10, arch="gpt2", size="tiny", data=data, record_whitening=True)}}
    for seed in (10, 11):
        r = M.trace("isoadam", h, 6, seed, arch="gpt2", size="tiny", data=data)
        runs[f"seeds/gpt2/isoadam/6/{seed}"] = {"hyper": h, "train_loss": r["train_loss"],
                                                "spikes": M.spikes(r["train_loss"]),
                                                "max_rel_step": np.max(r["rel_step"], axis=1).tolist(),
                                                "median_dir_norm": np.median(r["dir_norm"], axis=1).tolist()}
    names = ("adamw", "muon", "isoadam")
    runs["profile/gpt2/tiny"] = {"tokens_per_step": 64, "ms": M.profile(
        names, {"adamw": {"lr": 1e-3}, "muon": {"lr": 0.02, "side_lr": 1e-3}, "isoadam": h},
        arch="gpt2", size="tiny", data=data, rounds=1, steps=2, skip=1)}
    return {"runs": runs}


def test_the_mechanism_reads_into_words_checks_and_figures(tiny_mechanism):
    summary = R.mechanism_summary(tiny_mechanism)
    text = R.mechanism_text(summary, tiny_mechanism)
    assert "GPT-2" in text and "Llama:** Iso's step along the run not yet measured" in text
    rows = R.mechanism_checks(summary, tiny_mechanism)
    assert {r.claim.split(":")[0] for r in rows} == {"GPT-2"}        # Llama has no run: no claim
    claims = " / ".join(r.claim for r in rows)
    assert "under a quarter" in claims and "correlations are more than twice" in claims
    assert "reaches Muon's length" in claims
    assert len(R.isoadam_checks(summary)) == 1
    for build in (ch14.mechanism_figure, ch14.isoadam_figure):
        fig = build(tiny_mechanism)
        words = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
        assert isinstance(fig, Figure) and "GPT-2" not in words.split(ch14.NOT_YET)[0][-40:]
    for build in (ch14.mechanism_figure, ch14.isoadam_figure):
        empty = build(None)
        assert not empty.axes and [t.get_text().endswith(ch14.NOT_YET) for t in empty.texts] == [True]
    half = {"runs": {k: v for k, v in tiny_mechanism["runs"].items() if k.startswith("norms/")}}
    words = " ".join(t.get_text() for ax in ch14.mechanism_figure(half).axes for t in ax.texts)
    assert words.count(ch14.NOT_YET) == 3              # Llama's run and both first-step panels


def test_hero_verdict_and_budget_figures_draw_from_the_saved_file():
    bench = R.load()
    first = {"gpt2": {"layers": ["h.0.attn.c_attn", "h.0.mlp.c_fc"], "iso_step": [2.0, 4.0],
                      "muon_norm": [8.0, 16.0]}}
    fig = ch14.hero(bench, first)
    assert isinstance(fig, Figure) and "0.25–0.25" in " ".join(t.get_text() for t in fig.axes[1].texts)
    assert isinstance(ch14.verdict_figure(R.cells(bench)), Figure)
    budget = ch14.budget_figure(bench)
    missing = sum(t.get_text().endswith(ch14.NOT_YET) for ax in budget.axes for t in ax.texts)
    cells = R.cells(bench)
    expected = 0
    for arch in ch14.ARCH_NAMES:                     # a model without runs says so once
        gaps = sum((arch, s) not in cells for s in R.budgets(bench))
        expected += 1 if gaps == len(R.budgets(bench)) else gaps
    assert missing == expected


def test_first_step_on_a_tiny_model_is_the_formula_and_below_muons_norm():
    rec = C.first_step("llama", size="tiny", seed=10)
    for step, root, muon in zip(rec["iso_step"], rec["root_sum_rho2"], rec["muon_norm"]):
        assert step == pytest.approx(root, rel=1e-6)
        assert step < muon
