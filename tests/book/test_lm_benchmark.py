"""The language-model benchmark (issue 36): Iso's variants do what they say, the protocol's
invariants hold on a smoke run (equal configurations as run, held-out seeds disjoint from
the pilot's and the tuning seeds, every listed knob moved, ranges set by the pilot's rule),
a stopped run resumes without repeating a finished run, and the mechanism's measurements
agree with their definitions (Iso's first step has norm √Σρ² on the real models)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from isolab import linalg
from isolab.book import lm_bench_protocol as BP, lm_benchmark as B, lm_mechanism as M, lm_variants as V
from isolab.book.lm import sample_batch
from isolab.book.lm_protocol import data_seed, load_data
from isolab.book.seeding import generator
from isolab.optim import LayerStatistics

from scripts_loader import load_script

torch.set_num_threads(1)
SMOKE = BP.PROTOCOLS["smoke"]


@pytest.fixture(scope="module")
def data():
    return load_data(B.SIZES["tiny"]["context"], tune_windows=SMOKE["tune_windows"], test_windows=SMOKE["test_windows"])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, data):
    """A whole smoke benchmark on Llama (every optimizer), kept for the invariant tests."""
    path = tmp_path_factory.mktemp("bench") / "smoke.json"
    bench = BP.Benchmark(path, size="tiny", protocol="smoke", archs=("llama",))
    bench._data = data
    bench.run_all()
    return path, json.loads(path.read_text())


def _one_step(name, arch, hyper, data, **over):
    model = B.hf_model(arch, "tiny", 0)
    opt = B.build(name, model, hyper, 100)
    for g in opt.param_groups:
        g.update(over)
    layers = M.hidden_layers(model)
    before = {n: m.weight.detach().clone() for n, (m, _, _) in layers.items()}
    x, y = sample_batch(data.train, 4, 16, generator(data_seed(0)))
    B._loss(model, x, y).backward()
    opt.grads = {n: m.weight.grad.detach().clone() for n, (m, _, _) in layers.items()}
    opt.step()
    opt.remove_hooks()
    return model, opt, layers, {n: layers[n][0].weight.detach() - before[n] for n in layers}


# ------------------------------------------------------------------ the variants
@pytest.mark.parametrize("arch", B.ARCHS)
def test_normalized_iso_steps_with_muons_norm_in_either_weight_layout(arch, data):
    lr = 0.01
    _, _, layers, dw = _one_step("iso_norm", arch, {"lr": lr, "side_lr": 1e-3, "damping": 1e-3}, data)
    for n, (_, n_in, n_out) in layers.items():
        assert float(dw[n].norm()) / lr == pytest.approx(V.muon_norm(n_in, n_out), rel=1e-4), n
    assert V.muon_norm(64, 256) == pytest.approx(8.0 * 2.0) and V.muon_norm(256, 64) == pytest.approx(8.0)


@pytest.mark.parametrize("arch", B.ARCHS)
def test_polar_iso_is_muons_polar_factor_of_the_whitened_gradient(arch, data):
    lr = 0.01
    _, opt, layers, dw = _one_step("iso_polar", arch, {"lr": lr, "side_lr": 1e-3, "damping": 1e-3}, data)
    for n, (m, n_in, n_out) in layers.items():
        st, scale = opt.state[m.weight], math.sqrt(max(1.0, n_out / n_in))
        g = opt.grads[n]   # the first step's Nesterov momentum is a multiple of it: msign ignores the scale
        white = st["root_x"] @ g @ st["root_g"] if type(m).__name__ == "Conv1D" else st["root_g"] @ g @ st["root_x"]
        ref = linalg.msign_newton_schulz(white, steps=5) * scale
        assert float((-dw[n] / lr - ref).norm() / ref.norm()) < 1e-2, n   # W ← W − η·msign(P_X u P_G)
        s = torch.linalg.svdvals(dw[n].double()) / lr / scale
        assert s.numel() == min(n_in, n_out) and 0.68 < float(s.max()) < 1.15   # the quintic's band (its peak is 1.146)
        # GPT-2's LayerNorm centres: the layers it feeds (c_attn, c_fc) get inputs with no component
        # along the all-ones direction, and the layers that write into the residual stream (the two
        # c_proj) get output gradients with none (every reader of the stream is a LayerNorm, whose
        # Jacobian annihilates that direction). Each whitened gradient has one null direction, which
        # the polar factor keeps; Llama's RMSNorm does not centre
        if arch == "gpt2":   # (in, out) layout: the input side is the rows
            ones = torch.ones(n_in if n.endswith(("c_attn", "c_fc")) else n_out, dtype=white.dtype)
            side = ones @ white if n.endswith(("c_attn", "c_fc")) else white @ ones
            assert float(side.norm() / (white.norm() * ones.norm())) < 1e-3, n


@pytest.mark.parametrize("arch", B.ARCHS)
def test_second_moment_variant_equalizes_output_neurons(arch, data):
    _, _, layers, dw = _one_step("iso_nor", arch, {"lr": 0.01, "side_lr": 1e-3, "damping": 1e-3}, data)
    for n, (m, n_in, n_out) in layers.items():
        w = m.weight
        axis_out = 1 if tuple(w.shape) == (n_in, n_out) and type(m).__name__ == "Conv1D" else 0
        rms = dw[n].pow(2).mean(dim=1 - axis_out).sqrt()
        assert rms.numel() == n_out
        assert float(rms.max() / rms.min()) < 1 + 1e-3, n   # first step: every neuron's mean square is 1
        assert float(dw[n].norm()) / 0.01 == pytest.approx(V.muon_norm(n_in, n_out), rel=1e-4)


def test_diagonal_polar_whitens_with_the_diagonal_of_the_batch_covariance(data):
    model = B.hf_model("llama", "tiny", 0)
    opt = B.build("diag_polar", model, {"lr": 0.01, "side_lr": 1e-3, "damping": 1e-3}, 100)
    layers = M.hidden_layers(model)
    with LayerStatistics({n: m for n, (m, _, _) in layers.items()}, keep=True, dtype=torch.float64) as stats:
        x, y = sample_batch(data.train, 4, 16, generator(data_seed(0)))
        B._loss(model, x, y).backward()
        opt.step()
        for n, (m, _, _) in layers.items():
            X = stats.inputs(n).double()
            c = (X * X).mean(0)
            expected = (c + 1e-3 * c.mean()).rsqrt()
            R = opt.state[m.weight]["root_x"].double()
            assert torch.count_nonzero(R - torch.diag(torch.diagonal(R))) == 0
            torch.testing.assert_close(torch.diagonal(R), expected, rtol=1e-4, atol=0)
    opt.remove_hooks()


def test_a_run_that_blows_up_is_marked_diverged(data):
    r = B.run("adamw", {"lr": 1e4}, 8, 0, arch="gpt2", size="tiny", data=data)
    assert r["diverged"] and r["loss"] == math.inf
    ok = B.run("adamw", {"lr": 1e-3}, 8, 0, arch="gpt2", size="tiny", data=data)
    assert not ok["diverged"] and math.isfinite(ok["loss"]) and ok["step_ms"]["median"] > 0


def test_build_refuses_a_knob_the_optimizer_does_not_search():
    model = B.hf_model("gpt2", "tiny", 0)
    with pytest.raises(ValueError, match="searches"):
        B.build("muon", model, {"lr": 0.01, "side_lr": 1e-3, "damping": 1e-3}, 10)
    with pytest.raises(ValueError, match="side_lr"):
        B.build("iso", model, {"lr": 0.01}, 10)


# ------------------------------------------------------------------ the protocol
def test_every_optimizer_runs_the_same_number_of_configurations(smoke):
    _, res = smoke
    expected = SMOKE["coarse"] + SMOKE["knob_slots"] + SMOKE["refine_min"]
    counts = {k: BP.search_counts(s["trials"])["configurations"] for k, s in res["searches"].items()}
    assert len(counts) == len(B.OPTIMIZERS) and set(counts.values()) == {expected}, counts
    for s in res["searches"].values():   # the short rung runs every coarse rate, the whole budget the promoted
        short = [t for t in s["trials"] if t["phase"] == "coarse, short rung"]
        assert len(short) == SMOKE["coarse"] and all(t["steps"] == max(SMOKE["budgets"]) // 3 for t in short)


def test_every_listed_knob_is_moved_and_the_pilot_sets_every_range_by_one_rule(smoke):
    _, res = smoke
    pilot = res["pilot"]["llama"]
    assert set(pilot) == set(B.OPTIMIZERS)
    for name in B.OPTIMIZERS:
        s = res["searches"][f"llama/{name}/{SMOKE['budgets'][0]}"]
        values = lambda k: {t["hyper"][k] for t in s["trials"]}   # noqa: E731
        assert len(values("lr")) >= SMOKE["coarse"] + SMOKE["refine_min"]
        for move in B.KNOBS[name]:
            assert len(values(move.key)) >= 2, (name, move.key)
        if B.two_rates(name):
            assert len(values("side_lr")) >= 2
            assert pilot[name]["side_lr"] == pilot["adamw"]["best"]   # every AdamW group starts at AdamW's rate
        c = math.log10(pilot[name]["best"])
        np.testing.assert_allclose(s["coarse_lrs"], np.logspace(c - SMOKE["coarse_span"], c + SMOKE["coarse_span"],
                                                                SMOKE["coarse"]))
        assert pilot[name]["lrs"] == list(SMOKE["pilot_lrs"])


def test_heldout_seeds_are_disjoint_from_the_pilot_and_tuning_seeds(smoke, tmp_path, data):
    _, res = smoke
    runs = res["runs"]
    tuning = {int(k.split("|")[3]) for k in runs if k.split("|")[4] == "tune"}
    test = {int(k.split("|")[3]) for k in runs if k.split("|")[4] == "test"}
    assert tuning == set(SMOKE["tuning_seeds"]) | {SMOKE["pilot_seed"]}
    assert test == set(SMOKE["heldout_seeds"]) and not (tuning & test)
    for h in res["heldout"].values():
        assert h["seeds"] == list(SMOKE["heldout_seeds"]) and len(h["loss"]) == len(SMOKE["heldout_seeds"])
    bad = dict(SMOKE, heldout_seeds=(SMOKE["tuning_seeds"][0], 11))
    bench = BP.Benchmark(tmp_path / "bad.json", size="tiny", protocol=bad, archs=("llama",), optimizers=("adamw",))
    bench._data = data
    with pytest.raises(ValueError, match="held-out seeds"):
        bench.heldout("llama", "adamw", SMOKE["budgets"][0])


def test_summary_pairs_are_antisymmetric_and_say_their_coverage(smoke):
    _, res = smoke
    (cell, v), = res["summary"].items()
    assert cell == f"llama/{SMOKE['budgets'][0]}"
    for a, row in v["paired"].items():
        for b, d in row.items():
            assert d["median"] == pytest.approx(-v["paired"][b][a]["median"])
            assert d["n"] == len(SMOKE["heldout_seeds"]) and 0 < d["coverage"] < 1
    assert "time_ratio_to_adamw" in v["optimizers"]["isoadam"]


def test_a_stopped_benchmark_resumes_without_rerunning_what_it_finished(smoke, tmp_path, data, monkeypatch):
    path, res = smoke
    partial = dict(res)
    keys = sorted(res["runs"])
    dropped = keys[::7]
    partial["runs"] = {k: v for k, v in res["runs"].items() if k not in dropped}
    partial["searches"], partial["heldout"] = {}, {}
    partial["pilot"] = {}
    copy = tmp_path / "partial.json"
    copy.write_text(json.dumps(partial))
    calls = []
    real = B.run

    def counting(*args, **kw):
        calls.append(args[:4])
        return real(*args, **kw)

    monkeypatch.setattr(B, "run", counting)
    bench = BP.Benchmark(copy, size="tiny", protocol="smoke", archs=("llama",))
    bench._data = data
    bench.run_all()
    assert len(calls) == len(dropped)                   # only the missing runs were trained
    again = json.loads(copy.read_text())
    assert again["searches"] == res["searches"]          # and the same choices came out
    for k in res["heldout"]:
        assert again["heldout"][k]["loss"] == res["heldout"][k]["loss"]
    assert len(again["commands"]) == len(res["commands"]) + 1
    with pytest.raises(ValueError, match="another protocol"):
        BP.Benchmark(copy, size="tiny", protocol="default", archs=("llama",))


def test_the_script_runs_a_smoke_benchmark_and_prints_its_tables(tmp_path, capsys):
    script = load_script("lm_benchmark")
    out = tmp_path / "b.json"
    assert script.main(["--size", "tiny", "--protocol", "smoke", "--out", str(out), "--archs", "gpt2",
                        "--optimizers", "adamw", "muon", "isoadam"]) == 0
    res = json.loads(out.read_text())
    env = res["commands"][0]["environment"]
    assert env["commit"] and env["torch"] and res["models"]["gpt2"]["parameters"] > 0
    text = capsys.readouterr().out
    assert "gpt2/6 steps" in text and "IsoAdam" in text and "Muon (isolab)" in text


# ------------------------------------------------------------------ the mechanism
def test_canonical_correlations_match_the_svd_oracle():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 7, generator=g, dtype=torch.float64)
    G = X[:, :3] @ torch.randn(3, 5, generator=g, dtype=torch.float64) + torch.randn(300, 5, generator=g,
                                                                                   dtype=torch.float64)
    Ux = torch.linalg.svd(X, full_matrices=False)[0]
    Ug = torch.linalg.svd(G, full_matrices=False)[0]
    torch.testing.assert_close(M.canonical_correlations(X, G, 0.0), torch.linalg.svdvals(Ux.T @ Ug))
    assert float(M.canonical_correlations(X, G, 0.0).max()) <= 1 + 1e-12


@pytest.mark.parametrize("arch", B.ARCHS)
def test_isos_first_step_has_norm_root_sum_of_squared_canonical_correlations(arch, data):
    """On the real models: without momentum, Iso's first direction is the batch formula, so
    ‖ΔW‖/η = √Σρ² of the first training batch (Muon's would be √min(n, m)·√max(1, m/n))."""
    hyper = {"lr": 0.01, "side_lr": 1e-3, "damping": 1e-3}
    rec = M.trace("iso", hyper, 1, 0, arch=arch, size="tiny", data=data, record_whitening=True,
                  overrides={"momentum": 0.0})
    model = B.hf_model(arch, "tiny", 0)
    layers = M.hidden_layers(model)
    with LayerStatistics({n: m for n, (m, _, _) in layers.items()}, keep=True, dtype=torch.float64) as stats:
        x, y = sample_batch(data.train, 4, 16, generator(data_seed(0)))
        B._loss(model, x, y).backward()
        for i, n in enumerate(rec["layers"]):
            rho = M.canonical_correlations(stats.inputs(n), stats.output_grads(n), 1e-3)
            assert rec["dir_norm"][0][i] == pytest.approx(float(rho.pow(2).sum().sqrt()), rel=2e-3), n
            assert rec["whitened_norm"][0][i] == pytest.approx(rec["dir_norm"][0][i], rel=1e-5)
            assert rec["dir_norm"][0][i] < rec["muon_norm"][i]   # Iso's step is the smaller one here
    assert rec["refreshed"][0] == [True] * len(rec["layers"])
    assert max(abs(v) for v in rec["residual_x"][0]) < 1e-3   # fresh roots whiten their own batch


def test_roots_refreshed_every_ten_steps_lag_their_batch_in_between(data):
    rec = M.trace("iso", {"lr": 0.01, "side_lr": 1e-3, "damping": 1e-3}, 12, 0, arch="llama", size="tiny",
                  data=data, record_whitening=True)
    refreshed = [r[0] for r in rec["refreshed"]]
    assert [t + 1 for t, f in enumerate(refreshed) if f] == [1, 11]
    lag = np.array(rec["residual_x"])[:, 0]
    assert lag[0] < 1e-3 and lag[1:10].min() > 10 * lag[0]


def test_profile_splits_isoadams_time_and_spikes_finds_a_jump(data):
    hy = {"adamw": {"lr": 1e-3}, "isoadam": {"lr": 1e-3, "side_lr": 1e-3, "damping": 1e-3}}
    p = M.profile(list(hy), hy, arch="gpt2", size="tiny", data=data, rounds=1, steps=11, skip=2)
    assert p["adamw"]["statistics"] == [0.0] and p["adamw"]["roots"] == [0.0]
    iso = {k: v[0] for k, v in p["isoadam"].items()}
    assert iso["statistics"] > 0 and iso["roots"] > 0 and iso["apply"] > 0
    assert iso["roots"] + iso["apply"] + iso["step_rest"] == pytest.approx(iso["step"])
    loss = [3.0 - 0.01 * t for t in range(100)]
    loss[60] += 1.0
    s = M.spikes(loss)
    assert s["count"] == 1 and s["at"] == 61 and s["largest"] == pytest.approx(0.99)
    assert M.spikes([3.0 - 0.01 * t for t in range(100)])["count"] == 0


def test_mechanism_summary_reads_the_runs_it_is_given(data, tmp_path, capsys):
    h = {"lr": 0.01, "side_lr": 1e-3, "damping": 1e-3}
    norms = M.trace("iso", h, 30, 0, arch="llama", size="tiny", data=data, probe_every=10)
    early = M.trace("iso", h, 12, 0, arch="llama", size="tiny", data=data, record_whitening=True)
    runs = {"norms/llama/iso/30": {"hyper": h, **norms}, "early/llama/iso/as tuned": {"hyper": h, **early}}
    s = M.summarize(runs)
    v = s["norms"]["norms/llama/iso/30"]
    assert v["probe_step"] == [0, 10, 20, 30]
    first = [math.sqrt(sum(r * r for r in rho)) / mn for rho, mn in zip(norms["rho"][0], norms["muon_norm"])]
    assert v["iso_norm_over_muon"][0] == pytest.approx(float(np.median(first)))
    assert 0 < v["iso_norm_over_muon"][0] < 1 and math.isnan(v["dir_norm_over_muon"][2])   # 30 steps: no 301-end
    assert s["early"]["early/llama/iso/as tuned"]["lag_x"] > 0
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"runs": runs}))
    load_script("lm_benchmark").print_mechanism(path)
    assert "norms/llama/iso/30" in capsys.readouterr().out
