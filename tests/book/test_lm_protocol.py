"""Chapter 11's protocol: held-out files, standard errors, the optimizers' routing, the tuning
search, the reading of saved results, and the scripts that made them."""

import functools
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from isolab.book import lm, lm_protocol as P, lm_results as R

ROOT = Path(__file__).resolve().parents[2]
TINY = P.SIZES["tiny"]


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tiny_data():
    return P.data_for("tiny")


# ------------------------------------------------------------------ data
def test_files_split_three_ways_without_overlap():
    files = lm.stdlib_files()
    parts = P.split_files(files)
    sets = {k: set(v) for k, v in parts.items()}
    assert not (sets["train"] & sets["tune"]) and not (sets["train"] & sets["test"]) and not (sets["tune"] & sets["test"])
    assert sum(map(len, sets.values())) == len(files)
    assert abs(len(parts["test"]) / len(files) - 0.2) < 0.01 and abs(len(parts["tune"]) / len(files) - 0.1) < 0.01
    index = {p: i for i, p in enumerate(files)}
    for part in parts.values():   # every part reaches from the start of the library to its end
        assert min(index[p] for p in part) < 10 and max(index[p] for p in part) > len(files) - 11


def test_windows_stay_inside_their_file(tmp_path):
    texts = [b"abcdefghij" * 3, b"0123456789", b"xy"]
    files = []
    for i, t in enumerate(texts):
        (tmp_path / f"f{i}.py").write_bytes(t)
        files.append(tmp_path / f"f{i}.py")
    ws = P.window_set(files, context=4, max_windows=100)
    assert len(ws) == 7 + 2          # (30 - 1) // 4 and (10 - 1) // 4; the 2-byte file has none
    for x, y, f in zip(ws.x, ws.y, ws.file):
        window = bytes(x.tolist() + [y[-1].item()])
        assert window in texts[int(f)]
        assert torch.equal(x[1:], y[:-1])
    assert len(P.window_set(files, context=4, max_windows=3)) == 3
    with pytest.raises(ValueError, match="longer than a window"):
        P.window_set(files[2:], context=4, max_windows=10)


def test_standard_error_clustered_by_file():
    values = torch.tensor([1.0, 2.0, 4.0, 7.0], dtype=torch.float64)
    # one window per file: the clustered error is the ordinary one
    mean, se = P.mean_and_se(values, torch.arange(4))
    assert mean == pytest.approx(3.5) and se == pytest.approx(values.std().item() / 2)
    # windows of a file that agree with each other carry less information than independent ones
    twice = torch.cat([values, values])
    _, se_clustered = P.mean_and_se(twice, torch.cat([torch.arange(4), torch.arange(4)]))
    _, se_naive = P.mean_and_se(twice, torch.arange(8))
    assert se_clustered > se_naive


# ------------------------------------------------------------------ optimizers
def test_routing_rates_and_bad_input():
    model = lm.TransformerLM(TINY["model"], seed=0)
    hidden = {id(m.weight) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "head"}
    for name in P.OPTIMIZERS:
        opt = P.build_optimizer(name, model, 1e-2, 3e-3 if name == "muon" else None)
        routes = P.routing(opt)
        assert sum(n for _, n, _ in routes) == len(list(model.parameters()))
        assert all(g["peak_lr"] == g["lr"] for g in opt.param_groups)
        under_test = [g for g in opt.param_groups if {id(p) for p in g["params"]} == hidden]
        assert len(under_test) == 1 and under_test[0]["lr"] == 1e-2
        rest_lr = {g["lr"] for g in opt.param_groups if g is not under_test[0]}
        assert rest_lr == ({3e-3} if name == "muon" else {1e-2})
        getattr(opt, "remove_hooks", lambda: None)()
    from pytorch_optimizer import SOAP

    assert isinstance(P.build_optimizer("soap", model, 1e-2).parts[0], SOAP)
    with pytest.raises(ValueError, match="side_lr"):
        P.build_optimizer("muon", model, 1e-2)
    with pytest.raises(ValueError, match="side_lr"):
        P.build_optimizer("adam", model, 1e-2, 1e-3)
    with pytest.raises(ValueError, match="'lion'"):
        P.build_optimizer("lion", model, 1e-2)


def test_schedule_has_its_own_warmup_per_budget():
    assert P.lr_factor(0, 100) == pytest.approx(0.1) and P.lr_factor(9, 100) == pytest.approx(1.0)
    assert P.lr_factor(99, 100) == pytest.approx(0.1, abs=1e-3) and P.lr_factor(0, 900) == pytest.approx(1 / 90)


def test_run_is_deterministic_and_flags_divergence(tiny_data):
    kw = dict(model_cfg=TINY["model"], batch=TINY["batch"], data=tiny_data)
    a = P.run("adam", 1e-2, None, 8, 3, **kw)
    b = P.run("adam", 1e-2, None, 8, 3, **kw)
    assert a["loss"] == b["loss"] and a["train_loss"] == b["train_loss"] and not a["diverged"]
    iso = P.run("isoadam", 1e-2, None, 8, 3, score_on="test", reference=None, **kw)
    assert iso["train_loss"][0] == a["train_loss"][0]     # the seed fixes the weights and the first batch
    assert iso["train_loss"][3] != a["train_loss"][3]
    boom = P.run("adam", 1e4, None, 30, 3, **kw)
    assert boom["diverged"] and boom["loss"] == math.inf
    with pytest.raises(ValueError, match="score_on"):
        P.run("adam", 1e-2, None, 2, 0, score_on="validation", **kw)


def test_search_moves_off_an_edge_and_keeps_an_equal_budget(monkeypatch):
    calls = []

    def fake_run(name, lr, side_lr, steps, seed, model_cfg, batch, data, **kw):
        calls.append(steps)
        return {"loss": (math.log10(lr) + 0.6) ** 2 + (0 if side_lr is None else (math.log10(side_lr) + 1.5) ** 2)}

    monkeypatch.setattr(P, "run", fake_run)
    out = P.tune("adam", 90, model_cfg=None, batch=None, data=None)
    assert len(out["searches"]) == 2 and out["interior"]             # optimum 10^-0.6 lies above the first grid
    assert out["lr"] == pytest.approx(10 ** -0.5) and out["searches"][1]["shift"] == [4]
    assert calls.count(30) == 18 and calls.count(90) == 6              # 9 short and 3 long trials per search
    calls.clear()
    muon = P.tune("muon", 90, model_cfg=None, batch=None, data=None, seeds=(0, 1))
    assert len(muon["searches"][0]["trials"]) == 9 and muon["side_lr"] is not None
    assert calls.count(30) == 9 * 2 * len(muon["searches"])


def test_choice_is_the_best_full_budget_trial_of_every_search(monkeypatch):
    """A moved grid can drop the earlier winner in its first rung (short runs favour larger
    rates here); the setting returned is still the best one run to the end."""
    top = math.log10(P.grid_values("adam")[0][-1])      # the long runs' optimum: the first grid's top edge

    def fake_run(name, lr, side_lr, steps, seed, model_cfg, batch, data, **kw):
        best = top + (1.0 if steps < 90 else 0.0)          # the short runs' optimum lies a decade higher
        return {"loss": (math.log10(lr) - best) ** 2}

    monkeypatch.setattr(P, "run", fake_run)
    out = P.tune("adam", 90, model_cfg=None, batch=None, data=None, max_shifts=1)
    first, moved = out["searches"]
    assert P.grid_trials("adam", first["shift"])[first["chosen"]][0] == pytest.approx(10 ** top)  # on its edge
    assert moved["rung2"][str(moved["chosen"])] > 0       # the moved search's own winner is worse
    assert out["lr"] == pytest.approx(10 ** top) and out["tuning_loss"] == pytest.approx(0, abs=1e-24)
    assert out["chosen_search"] == 0 and out["interior"]  # inside the values the two searches covered
    assert P.best_of_searches(out["searches"]) == (0, first["chosen"])


# ------------------------------------------------------------------ reading saved results
def _protocol(losses):
    """A minimal results dict: ``losses[name][budget]`` = per-seed held-out losses."""
    heldout = {}
    for name, by_budget in losses.items():
        for b, values in by_budget.items():
            runs = [{"seed": 10 + i, "loss": v, "paired_se": 0.001, "diverged": False} for i, v in enumerate(values)]
            median = sorted(values)[len(values) // 2]
            heldout[f"{name}/{b}"] = {"runs": runs, "summary": {"median": median, "interval90": [min(values), max(values)]}}
    return {"meta": {"budgets": sorted({b for d in losses.values() for b in d})}, "heldout": heldout}


def test_step_speedup_reads_adams_budgets():
    pr = _protocol({"adam": {100: [3.0] * 3, 300: [2.5] * 3, 900: [2.0] * 3},
                    "fast": {100: [2.5] * 3, 300: [2.25] * 3, 900: [1.5] * 3}})
    assert R.step_speedup(pr, "fast", 100) == (pytest.approx(3.0), "measured")
    factor, kind = R.step_speedup(pr, "fast", 300)
    assert kind == "measured" and factor == pytest.approx(math.sqrt(3) * 3 / 3)
    assert R.step_speedup(pr, "fast", 900) == (pytest.approx(1.0), "at least")
    slow = _protocol({"adam": {100: [2.0] * 3, 300: [1.5] * 3}, "slow": {100: [3.0] * 3, 300: [2.5] * 3}})
    assert R.step_speedup(slow, "slow", 300)[1] == "at most"
    d = R.paired(pr, "fast", 100)
    assert d["diffs"] == [-0.5] * 3 and d["wins"] == 3


def test_timing_ratios_noise_and_seconds():
    rounds = 8
    saved = {"sizes": {"s": {"ms": {
        "adam": {"fwd_bwd": [10.0] * rounds, "step": [1.0] * rounds},
        "adam again": {"fwd_bwd": [10.0, 10.5] * (rounds // 2), "step": [1.0] * rounds},
        "slow": {"fwd_bwd": [20.0] * rounds, "step": [2.0] * rounds}}}}}
    stats = R.timing(saved, "s")
    assert stats["slow"]["ratio"][0] == pytest.approx(2.0) and stats["adam"]["total"][0] == pytest.approx(11.0)
    assert R.beyond_noise(stats, "slow") and not R.beyond_noise(stats, "adam again")
    pr = _protocol({"adam": {100: [3.0] * 3, 300: [2.0] * 3}, "slow": {100: [2.5] * 3, 300: [1.8] * 3}})
    matched = R.seconds_matched(pr, saved, "s")
    (b, sec, loss, ref), (_, sec2, _, ref2) = matched["slow"]
    assert (b, sec, loss) == (100, pytest.approx(2.2), 2.5)
    assert ref == pytest.approx(2.0 + (3.0 - 2.0) * (1 - math.log(2) / math.log(3)))
    assert sec2 == pytest.approx(6.6) and math.isnan(ref2)             # beyond Adam's longest budget


# ------------------------------------------------------------------ the scripts and their saved results
def test_training_script_end_to_end(tmp_path):
    script = _script("train_transformer")
    out = tmp_path / "t.json"
    res = script.run("tiny", out=out, log=None)
    back = lm.load_results(out)
    keys = {f"{n}/{b}" for n in P.OPTIMIZERS for b in TINY["budgets"]}
    assert set(back["tuned"]) == keys and set(back["heldout"]) == keys
    meta = back["meta"]
    assert meta["heldout_seeds"] == list(TINY["heldout_seeds"]) and meta["grids"]["muon"] and meta["command"]
    for key, entry in back["heldout"].items():
        assert [r["seed"] for r in entry["runs"]] == list(TINY["heldout_seeds"])
        assert (entry["runs"][0]["paired_se"] is None) == key.startswith("adam/")
    # a held-out run repeated gives the saved loss
    t = res["tuned"]["isoadam/12"]
    again = P.run("isoadam", t["lr"], t["side_lr"], 12, 10, TINY["model"], TINY["batch"], P.data_for("tiny"),
                  score_on="test")
    assert again["loss"] == back["heldout"]["isoadam/12"]["runs"][0]["loss"]


def test_redo_edges_equals_a_run_with_more_moves(tmp_path):
    script = _script("train_transformer")
    out = tmp_path / "t.json"
    script.MAX_SHIFTS = 0                       # a file written when no move off an edge was allowed
    first = script.run("tiny", optimizers=("adam", "muon"), budgets=(6,), out=out, log=None)
    edges = [k for k, e in first["tuned"].items() if not e["interior"]]
    assert edges, "the tiny grid should put some choice on an edge"
    script.MAX_SHIFTS = 2
    copy = tmp_path / "copy.json"
    copy.write_text(out.read_text())
    redone = script.redo_edges("tiny", copy, log=None)
    merged = script.merge_extension(copy, out)
    assert merged["tuned"] == redone["tuned"] and merged["heldout"] == redone["heldout"]
    direct = script.run("tiny", optimizers=("adam", "muon"), budgets=(6,), out=None, log=None)
    for key in first["tuned"]:
        assert redone["tuned"][key]["lr"] == direct["tuned"][key]["lr"]
        assert redone["tuned"][key]["side_lr"] == direct["tuned"][key]["side_lr"]
        assert [r["loss"] for r in redone["heldout"][key]["runs"]] == [r["loss"] for r in direct["heldout"][key]["runs"]]
    assert redone["meta"]["extensions"][0]["keys"] == edges and redone["meta"]["max_shifts"] == 2


def test_timing_script_interleaves_every_lane(tmp_path):
    script = _script("ch11_timing")
    out = tmp_path / "timing.json"
    script.main(["--sizes", "tiny", "--rounds", "3", "--warmup", "1", "--out", str(out)])
    saved = lm.load_results(out)["sizes"]["tiny"]
    assert all(sorted(order) == sorted(script.LANES) for order in saved["orders"]) and len(saved["orders"]) == 3
    assert all(len(m["fwd_bwd"]) == 3 and len(m["step"]) == 3 for m in saved["ms"].values())
    with pytest.raises(SystemExit):
        script.main(["--steps", "7"])


#: entries whose best setting stayed on an edge after two moves of the grid; Chapter 11 reports each
EDGES_REPORTED = {"adam2/100", "soap2/100", "muon/400"}


@functools.lru_cache(maxsize=None)
def _saved(size):
    return R.load(f"transformer_{size}")


@pytest.mark.parametrize("size", ["chapter", "full"])
def test_saved_protocol_is_complete_and_interior(size):
    saved = _saved(size)
    meta = saved["meta"]
    assert meta["size"] == size and meta["command"].startswith("python scripts/train_transformer.py")
    keys = {f"{n}/{b}" for n in P.SIZES[size]["saved"] for b in meta["budgets"]}
    assert keys <= set(saved["tuned"]) == set(saved["heldout"])
    assert {k.split("/")[0] for k in saved["tuned"]} <= set(P.OPTIMIZERS + P.TWO_RATES)
    for key, entry in saved["tuned"].items():
        # a choice on an edge is allowed only where Chapter 11 says so (its tuned table marks it)
        assert entry["interior"] or key in EDGES_REPORTED, f"{key}: the chosen rate is on the edge of its grid"
        assert all(len(s["trials"]) == 9 for s in entry["searches"])
        assert len(saved["heldout"][key]["runs"]) == len(meta["heldout_seeds"]) >= 3
        # the setting is the best full-length trial of every search (lm_protocol.tune's rule)
        at = P.best_of_searches(entry["searches"])
        assert P.grid_trials(key.split("/")[0], entry["searches"][at[0]]["shift"])[at[1]] == \
            (entry["lr"], entry["side_lr"]), f"{key}: not the best trial of its searches"


def test_saved_chapter_runs_rerun():
    """Two held-out runs of the saved chapter-size protocol, trained again here."""
    saved, cfg = _saved("chapter"), P.SIZES["chapter"]
    data = P.data_for("chapter")
    for name in ("adam", "isoadam"):
        t = saved["tuned"][f"{name}/100"]
        again = P.run(name, t["lr"], t["side_lr"], 100, 10, cfg["model"], cfg["batch"], data, score_on="test")
        assert abs(again["loss"] - saved["heldout"][f"{name}/100"]["runs"][0]["loss"]) < 0.01


def test_saved_full_size_tuning_trial_reruns():
    """The first-rung score of the chosen Adam trial at full size, trained again here."""
    saved, cfg = _saved("full"), P.SIZES["full"]
    budget = saved["meta"]["budgets"][0]
    entry = saved["tuned"][f"adam/{budget}"]
    search = entry["searches"][-1]
    lr = search["trials"][search["chosen"]][0]
    again = P.run("adam", lr, None, search["rung_steps"][0], entry["tuning_seeds"][0], cfg["model"], cfg["batch"],
                  P.data_for("full"))
    assert abs(again["loss"] - search["rung1"][search["chosen"]]) < 0.01


def test_saved_timing_covers_both_sizes_at_the_tuned_rates():
    timing = R.load("ch11_timing")
    for size, entry in timing["sizes"].items():
        assert all(len(m["fwd_bwd"]) == timing["meta"]["rounds"] for m in entry["ms"].values())
        budget = max(_saved(size)["meta"]["budgets"])
        for name in entry["rates"]:
            t = _saved(size)["tuned"].get(f"{name}/{budget}")
            if t is not None:
                assert entry["rates"][name] == [t["lr"], t["side_lr"]]


# ----------------------------------------------------------------------------- protocol version 3
def test_v3_search_runs_the_same_trials_for_everyone_and_never_moves_a_grid(monkeypatch):
    """tune_v3: 9 coarse trials (three rates per damping or eps; Muon nine rates), 4 refining
    rates strictly between the winner's neighbours, every trial on every tuning seed, a
    divergence on any seed out; exactly 13 trials for every optimizer, whatever it finds."""
    calls = []

    def fake_run(name, lr, side_lr, steps, seed, *args, knobs=None, **kw):
        calls.append((name, lr, steps, seed, tuple(sorted((knobs or {}).items()))))
        bad = lr > 0.05 and seed == 2                 # a rate that diverges on one seed is out
        return {"loss": math.inf if bad else (math.log(lr / 0.01)) ** 2 + 1.0}

    monkeypatch.setattr(P, "run", fake_run)
    out = {}
    for name in P.V3["names"]:
        t = P.tune_v3(name, model_cfg=None, batch=None, data=None, pilot_centre=0.01)
        out[name] = t
        assert t["trials_run"] == P.V3["coarse"] + P.V3["refine"] == 13
        assert len(t["searches"]) == 2 and [s["phase"] for s in t["searches"]] == ["coarse", "refine"]
        coarse_lrs = sorted({lr for _, lr in t["searches"][0]["trials"]})
        assert coarse_lrs[0] == pytest.approx(0.01 / 6) and coarse_lrs[-1] == pytest.approx(0.01 * 6)
        refine = [lr for _, lr in t["searches"][1]["trials"]]
        assert all(coarse_lrs[0] < lr < coarse_lrs[-1] for lr in refine)
        assert t["lr"] == pytest.approx(0.01, rel=0.3) and t["interior"]
    assert {len({tuple(k.items()) for k, _ in out[n]["searches"][0]["trials"]}) for n in ("adam2", "isoadam2", "soap2")} == {3}
    assert len({lr for _, lr in out["muon"]["searches"][0]["trials"]}) == 9
    assert {s for *_, s, _ in calls} == set(P.V3["tuning_seeds"])


def test_v3_pilot_stops_at_an_end_of_its_span(monkeypatch):
    monkeypatch.setattr(P, "run", lambda name, lr, *a, **k: {"loss": lr})    # best at the smallest rate
    with pytest.raises(RuntimeError, match="end of its span"):
        P.pilot_v3("adam2", model_cfg=None, batch=None, data=None)
    monkeypatch.setattr(P, "run", lambda name, lr, *a, **k: {"loss": abs(math.log10(lr) + 2)})
    assert P.pilot_v3("adam2", model_cfg=None, batch=None, data=None)["centre"] == pytest.approx(0.01)


def test_v3_verdicts_need_both_sets_and_time_verdicts_read_adams_budgets():
    from isolab.book import lm_results as R

    def runs(losses):
        return [{"loss": v, "diverged": False} for v in losses]

    d = {"heldout": {"a": runs([1, 1, 1, 1, 1]), "b": runs([2, 2, 2, 2, 2])},
         "fresh": {"a": runs([1, 1, 1, 1, 3]), "b": runs([2, 2, 2, 2, 2])}}
    assert R.v3_verdict(d, "a", "b")[0] == "unresolved"        # one fresh seed the other way
    d["fresh"]["a"] = runs([1, 1, 1, 1, 1.5])
    assert R.v3_verdict(d, "a", "b")[0] == "ahead"
    curve = {100: np.array([3.0, 3.0]), 300: np.array([2.0, 2.0])}
    assert R.adam_at(curve, 100 * 3 ** 0.5) == pytest.approx([2.5, 2.5])
    assert np.isnan(R.adam_at(curve, 400)).all()
