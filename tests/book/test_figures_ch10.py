"""Chapter 10's figures and saved results: the figure functions build from the saved
protocol results, the explorable keeps its caption's promises over its whole grid, and
results/sweeps_explorable.npz is what scripts/explorable_sweeps.py computes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.text import Text
from scripts_loader import load_script

from isolab.book.explorable import MIN_MAIN_VALUES
from isolab.book.figures import ch10, style
from isolab.book.figures.saved import saved_result
from isolab.book.results import load

script = load_script("explorable_sweeps")
#: The protocol files the chapter reads; the reduced ones are always there (the full ones
#: once scripts/run_sweeps.py has written them).
PROTOCOL = ["protocol_reduced_fig3.npz", "protocol_reduced_fig4.npz", "protocol_reduced_ablation.npz"]


@pytest.fixture(scope="module")
def grid():
    return ch10.SweepGrid()


@pytest.fixture(scope="module")
def protocol():
    return {name: load(saved_result(name, download=False)) for name in PROTOCOL}


def _small_text(fig):
    fig.canvas.draw()
    return sorted({(round(t.get_fontsize(), 1), t.get_text()[:30]) for t in fig.findobj(Text)
                   if t.get_visible() and t.get_text().strip() and t.get_fontsize() < 10})


# ---------------------------------------------------------------- the explorable
def test_explorable_main_slider_and_promises(grid):
    e = ch10.sweeps(grid)
    assert e.main == "kappa" and len(e.main_slider.values) >= MIN_MAIN_VALUES
    assert len(e.promises) == 2
    broken = e.broken_promises()
    assert not broken, "\n".join(map(str, broken[:5]))


def test_the_promises_could_fail(grid):
    """The promises measure something that moves: SGD's best rate does fall with κ
    somewhere, and a strict reading of "Iso's best rate is constant" would fail."""
    e = ch10.sweeps(grid)
    sgd, iso = e.promises
    values = [sgd.measure(kappa=k, rotated="axis-aligned", depth=4, batch=64) for k in grid.kappas]
    assert values[-1] < values[0]
    iso_values = [iso.measure(kappa=k, rotated="axis-aligned", depth=4, batch=64) for k in grid.kappas]
    assert max(iso_values) > min(iso_values)


def test_explorable_draws_every_corner_without_small_text(grid):
    e = ch10.sweeps(grid)
    for kappa in (grid.kappas[0], grid.kappas[-1]):
        for rotated in ("axis-aligned", "rotated 45°"):
            fig = e.render(strict=True, kappa=kappa, rotated=rotated, depth=2, batch=16)
            assert not _small_text(fig)
    assert e.n_frames <= 80, "every combination is a website frame (2 MB budget)"


def test_kappa_ratios_at_the_chapters_setting(grid):
    r = ch10.kappa_ratios(grid, 4, 64, 100.0, 0.0)
    assert set(r) == {"sgd", "adam", "iso", "isoadam"}
    assert max(r, key=r.get) == "isoadam"           # what the chapter prints and checks
    assert all(math.isfinite(v) and v > 0 for v in r.values())
    assert ch10.kappa_ratios(grid, 4, 64, 1.0, 0.0) == {n: 1.0 for n in r}


# ---------------------------------------------------------------- the saved grid
def test_the_saved_grid_is_the_scripts_grid(grid):
    meta = grid.meta
    assert meta["depths"] == list(script.DEPTHS) and meta["batches"] == list(script.BATCHES)
    assert meta["kappas"] == list(script.KAPPAS) and meta["angles"] == list(script.ANGLES)
    assert meta["optimizers"] == list(script.LR_GRIDS) and meta["command"] == script.COMMAND
    assert meta["problem"]["seeds"] == list(script.SEEDS) and meta["problem"]["steps"] == script.STEPS
    for name in script.LR_GRIDS:
        assert script.learning_rates(name).size >= 20
        assert {k: v for k, v in meta["hyper"][name].items() if k in script.HYPER[name]} == {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in script.HYPER[name].items()}
    assert grid.relative.shape == (3, 3, 9, 2, 4, len(script.SEEDS), 20)
    finite = np.isfinite(grid.relative)
    assert finite.mean() > 0.5 and (~finite).any(), "a sweep grid should both converge and diverge somewhere"


def test_best_rates_are_inside_their_grids(grid):
    """The explorable's lr grids bracket every optimum they show (the chapter's depths
    and batches): no best rate at a grid edge."""
    edges = [(n, d, b, k, a) for n in grid.names for d in ch10.SHOWN_DEPTHS for b in ch10.SHOWN_BATCHES
             for k in grid.kappas for a in grid.angles if grid.at_edge(n, d, b, k, a)]
    assert not edges, edges[:5]


@pytest.mark.parametrize("name, depth, batch, kappa, angle", [("iso", 2, 16, 1000.0, 45.0), ("sgd", 8, 256, 1.0, 0.0)])
def test_a_setting_retrained_equals_the_saved_one(grid, name, depth, batch, kappa, angle):
    torch.set_num_threads(1)
    from_script = script.relative_final_loss(script.one_setting(name, depth, batch, kappa, angle))
    from_meta = ch10.retrain(grid, name, depth, batch, kappa, angle)
    saved = grid.values(name, depth, batch, kappa, angle)
    assert ch10.same_sweep(from_script, saved) and ch10.same_sweep(from_meta, saved)


def test_same_sweep_notices_a_difference():
    nan = np.nan
    saved = np.array([[0.5, 0.1, 0.2, 0.4, nan, nan]])
    assert ch10.same_sweep(saved.copy(), saved)
    assert not ch10.same_sweep(saved * 1.05, saved)
    assert ch10.same_sweep(np.array([[0.5, 0.1, 0.21, 0.3, nan, nan]]), saved)   # above the best: outcome only
    assert not ch10.same_sweep(np.array([[0.5, 0.1, 0.05, 0.4, nan, nan]]), saved)  # another best rate
    assert ch10.same_sweep(np.array([[0.5, 0.1, 0.2, 0.4, 9.0, nan]]), saved)     # the edge one step later
    assert ch10.same_sweep(np.array([[0.5, 0.1, 0.2, nan, nan, nan]]), saved)     # or one step earlier
    assert not ch10.same_sweep(np.array([[0.5, 0.1, nan, nan, nan, nan]]), saved)  # two steps: no
    assert not ch10.same_sweep(np.array([[0.5, 0.1, 0.2, 0.4, 0.5, 0.6]]), saved)  # no edge at all


def test_script_save_and_load_round_trip(tmp_path):
    data = {"relative": np.arange(6.0).reshape(1, 2, 3), "meta": {"command": "x", "depths": [1]}}
    out = script.load(script.save(data, tmp_path / "s.npz"))
    assert np.array_equal(out["relative"], data["relative"]) and out["meta"] == data["meta"]


# ---------------------------------------------------------------- the protocol figures
def test_the_saved_protocol_results_load(protocol):
    fig3 = ch10.protocol_summaries(protocol["protocol_reduced_fig3.npz"], "fig3/")
    assert {"sgd", "sgd_plain", "adam", "muon", "iso", "isoadam", "soap", "shampoo_graft"} <= set(fig3)
    for s in fig3.values():
        assert s["low"] <= s["median"] <= s["high"] and len(s["values"]) == len(s["seeds"]) >= 2
        assert not set(s["seeds"]) & set(s["sweep"].info["tuned"]["tuning_seeds"]), "held-out seeds were tuned on"
    budgets = ch10.budgets_of(protocol["protocol_reduced_fig4.npz"])
    assert len(budgets) >= 2
    with pytest.raises(KeyError, match="fig9/"):
        ch10.protocol_summaries(protocol["protocol_reduced_fig3.npz"], "fig9/")


def test_protocol_figures_build(protocol):
    fig3 = ch10.protocol_summaries(protocol["protocol_reduced_fig3.npz"], "fig3/")
    f4 = protocol["protocol_reduced_fig4.npz"]
    fig4 = {b: ch10.protocol_summaries(f4, f"fig4/b{b}/") for b in ch10.budgets_of(f4)}
    ab = protocol["protocol_reduced_ablation.npz"]
    ablation = {n: list(ch10.protocol_summaries(ab, f"ablation/{n}/").items()) for n in ("iso", "isoadam")}
    figures = [ch10.protocol_figure([(fig3, "iterations", "5 layers"), (fig4[max(fig4)], "loss", "40 layers")], "t"),
               ch10.budget_figure(fig4, "loss", "t"),
               ch10.ablation_figure(ablation, {"isoadam": fig4[max(fig4)]["isoadam"]}, "loss", "t")]
    for fig in figures:
        assert isinstance(fig, Figure)
        assert not _small_text(fig)
    hero = figures[0]
    labels = [t.get_text() for t in hero.axes[0].get_yticklabels()]
    best = min(fig3, key=lambda n: fig3[n]["median"])
    assert labels[-1] == ch10.label(best), "rows are sorted by the median, best at the top"
    assert len(figures[1].axes) == len(fig4)
    text = ch10.table(fig3, digits=None)
    assert text.splitlines()[1].startswith(ch10.label(best)) and len(text.splitlines()) == len(fig3) + 1
    assert "% interval]" in text.splitlines()[0] and "90%" not in text


def test_paired_verdicts_need_every_run(protocol):
    """ahead/verdict: a ranking on paired seeds holds only where its interval excludes zero
    in the saved run and in every rerun; a verdict that flips between runs is unresolved."""
    s = {"a": {"values": np.arange(1.0, 21.0)}, "b": {"values": np.arange(1.0, 21.0) * 1.5},
         "c": {"values": np.arange(1.0, 21.0) * np.where(np.arange(20) % 2, 1.2, 0.8)}}
    assert ch10.ahead(s, "a", "b") and not ch10.ahead(s, "b", "a") and not ch10.ahead(s, "a", "c")
    assert ch10.verdict([s, s], "a", ["b"]) == "yes" and ch10.verdict([s], "b", ["a"]) == "no"
    assert ch10.verdict([s], "a", ["b", "c"]) == "unresolved"
    flipped = {"a": {"values": s["b"]["values"]}, "b": {"values": s["a"]["values"]}}
    assert ch10.verdict([s, flipped], "a", ["b"]) == "unresolved"


def test_rankings_ties_and_the_damping_refutation_read_every_run():
    """rankings: ahead in every run that holds both; ties: not ahead either way in at least
    one run; refuted_with_damping asserts Iso is ahead in none of the runs."""
    from isolab.book.checks import ClaimFailed, report

    base = np.arange(1.0, 21.0)
    s = {"iso": {"values": base}, "muon": {"values": base * 0.8}, "IsoAdam, damping 1e-4": {"values": base * 0.5}}
    flip = {"iso": {"values": base}, "muon": {"values": base * 1.25}, "IsoAdam, damping 1e-4": {"values": base * 2}}
    assert [c.holds for c in ch10.rankings([s, s], [("muon", "iso")])] == [True]
    assert [c.holds for c in ch10.rankings([s, flip], [("muon", "iso")])] == [False]
    assert [c.holds for c in ch10.ties([s, flip], [("muon", "iso")])] == [True]
    assert [c.holds for c in ch10.ties([s, s], [("muon", "iso")])] == [False]
    report([ch10.refuted_with_damping([s, s])])                 # IsoAdam ahead in both: refuted
    with pytest.raises(ClaimFailed, match="once IsoAdam's damping is tuned too"):
        report([ch10.refuted_with_damping([s, flip])])          # Iso ahead in one run


def test_the_paper_claims_assert_their_stated_verdicts(protocol):
    from isolab.book.checks import ClaimFailed, report

    fig3 = ch10.protocol_summaries(protocol["protocol_reduced_fig3.npz"], "fig3/")
    f4 = protocol["protocol_reduced_fig4.npz"]
    fig4 = {b: [ch10.protocol_summaries(f4, f"fig4/b{b}/")] for b in ch10.budgets_of(f4)}
    main = max(fig4)

    def computed():
        out = {"5 layers": {}, **{f"40 layers, {b} steps": {} for b in fig4}}
        names = [n for n in fig3 if n != "iso"]
        for where, runs in [("5 layers", [fig3])] + [(f"40 layers, {b} steps", fig4[b]) for b in fig4]:
            out[where] = {"four": ch10.verdict(runs, "iso", ["sgd", "adam", "isoadam"]),
                          "all": ch10.verdict(runs, "iso", [n for n in runs[0] if n != "iso"])}
        return out

    said = {w: {k: {"yes": "reproduced", "no": "refuted", "unresolved": "unresolved"}[v] for k, v in d.items()}
            for w, d in computed().items()}
    for where, summary in [("5 layers", fig3), (f"40 layers, {main} steps", fig4[main][0])]:
        ratio = summary["adam"]["lr"] / summary["isoadam"]["lr"]
        said[where]["lr"] = "reproduced" if 0.5 <= ratio <= 2 else "refuted"
    report(ch10.paper_claims([fig3], fig4, main, said))          # what the reduced files say holds
    wrong = {w: dict(d) for w, d in said.items()}
    wrong["5 layers"]["all"] = "reproduced" if said["5 layers"]["all"] != "reproduced" else "refuted"
    with pytest.raises(ClaimFailed, match="5 layers: Iso is best of all"):
        report(ch10.paper_claims([fig3], fig4, main, wrong))


def test_interval_panel_survives_divergence():
    fig = Figure()
    ax = fig.subplots()
    summary = {"iso": {"median": 2.0, "low": 1.5, "high": 3.0, "values": np.array([1.5, 2.0, 3.0])},
               "shampoo": {"median": math.inf, "low": 10.0, "high": math.inf, "values": np.array([10.0, np.inf, np.inf])}}
    order = ch10.interval_panel(ax, summary, "loss")
    assert order == ["iso", "shampoo"]
    fig.canvas.draw()


def test_variant_labels_and_looks():
    assert ch10.variant_label("momentum=0.9,placement=update") == "momentum 0.9, after whitening"
    assert ch10.variant_label("default") == "our reading (default)"
    assert ch10.variant_label("root_interval=1") == "roots every 1 step"
    assert ch10.look("shampoo_graft")["color"] == style.color("Shampoo")
    assert ch10.look("sgd_plain")["markerfacecolor"] == "none" and ch10.short("sgd_plain") == "SGD"
    assert ch10.separated({"a": {"low": 1, "high": 2}, "b": {"low": 3, "high": 4}}, "a", "b")
    assert not ch10.separated({"a": {"low": 1, "high": 3.5}, "b": {"low": 3, "high": 4}}, "a", "b")


def test_the_full_protocol_files_the_chapter_reads_are_well_formed():
    """Every full protocol file present (the chapter reads them once the full run has
    written them): held-out seeds apart from the tuning seeds, intervals around the
    median, every hyperparameter named."""
    from isolab.book.figures.saved import LOCAL

    present = [n for n in ("protocol_fig3.npz", "protocol_fig4.npz", "protocol_ablation.npz") if (LOCAL / n).exists()]
    assert "protocol_fig3.npz" in present, "the chapter reads results/protocol_fig3.npz"
    for name in present:
        results = load(LOCAL / name)
        for s in results:
            h, t = s.info["heldout"], s.info["tuned"]
            assert len(h["seeds"]) >= 20 and not set(h["seeds"]) & set(t["tuning_seeds"])
            assert h["low"] <= h["median"] <= h["high"]
            assert set(t["hyper"]) >= {"weight_decay"} and "lr" not in t["hyper"]
