"""The cost options of Iso/IsoAdam: row-subsampled statistics (``stat_rows``), capture
only on statistics steps, and their state through a checkpoint."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from isolab.optim import Iso, IsoAdam, LayerStatistics
from isolab.optim import capture as stats_module


def mlp(seed=0, width=16, depth=3):
    torch.manual_seed(seed)
    layers = []
    for i in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def batches(n, rows=64, width=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)) for _ in range(n)]


def train(model, opt, data):
    for x, y in data:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


# ------------------------------------------------------------------------------ validation
@pytest.mark.parametrize("cls", [Iso, IsoAdam])
@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "64"])
def test_stat_rows_rejects_bad_values_naming_them(cls, bad):
    with pytest.raises(ValueError, match="stat_rows") as e:
        cls(mlp(), stat_rows=bad)
    assert repr(bad) in str(e.value)


def test_stat_rows_in_param_groups_is_validated():
    model = mlp()
    with pytest.raises(ValueError, match=r"stat_rows.*got 0"):
        IsoAdam(model, params=[{"params": [model[0].weight], "stat_rows": 0}])


# ------------------------------------------------------------------------------ semantics
@pytest.mark.parametrize("cls", [Iso, IsoAdam])
def test_stat_rows_at_least_the_batch_is_bitwise_full_statistics(cls):
    data = batches(5, rows=64)
    runs = []
    for limit in (None, 64, 1000):
        model = mlp()
        opt = cls(model, stat_rows=limit, stat_interval=1, root_interval=2)
        train(model, opt, data)
        runs.append([p.detach().clone() for p in model.parameters()])
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other))


def test_subsampled_sums_use_n_distinct_rows_scaled_by_b_over_n():
    # X = I (row i is the i-th basis vector) and G = I: X_SᵀX_S is the indicator of the drawn rows
    b, limit = 32, 8
    layer = nn.Linear(b, b, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(b))
    with LayerStatistics({"fc": layer}) as st:
        st.stat_rows = {"fc": limit}
        st.clear()
        x = torch.eye(b)
        (layer(x) * torch.eye(b)).sum().backward()
        xx, gg, rows = st.sums("fc")
        assert rows == b and st.used_rows("fc") == limit
        dx, dg = torch.diagonal(xx), torch.diagonal(gg)
        picked = dx != 0
        assert int(picked.sum()) == limit
        assert torch.allclose(dx[picked], torch.full((limit,), b / limit))
        assert torch.equal(dg != 0, picked)  # the same rows for X and G
        assert torch.equal(xx, torch.diag(dx))  # no cross terms: distinct rows
        assert float(dx.sum()) == pytest.approx(b)  # trace is unbiased exactly here


def test_subsampled_sums_are_unbiased():
    torch.manual_seed(0)
    layer = nn.Linear(6, 5)
    x = torch.randn(40, 6) * torch.arange(1.0, 7.0)
    with LayerStatistics({"fc": layer}, dtype=torch.float64) as st:
        layer(x).pow(2).sum().backward()
        full_x, full_g, _ = st.sums("fc")
        st.stat_rows = {"fc": 10}
        acc_x, acc_g, draws = 0, 0, 400
        for seed in range(draws):
            st.sample_seed = seed
            st.clear()
            layer(x).pow(2).sum().backward()
            sx, sg, _ = st.sums("fc")
            acc_x, acc_g = acc_x + sx, acc_g + sg
    rel = lambda a, b: float((a / draws - b).norm() / b.norm())  # noqa: E731
    assert rel(acc_x, full_x) < 0.05 and rel(acc_g, full_g) < 0.05
    one_draw = float((sx - full_x).norm() / full_x.norm())
    assert one_draw > 0.01  # one draw alone is not the full sum: the option does subsample


def test_stat_rows_changes_the_step_and_is_seeded_by_the_step():
    data = batches(4, rows=64)
    out = []
    for limit in (None, 16, 16):
        model = mlp()
        opt = IsoAdam(model, stat_rows=limit, stat_interval=1, root_interval=1)
        train(model, opt, data)
        out.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert not torch.equal(out[0], out[1])
    assert torch.equal(out[1], out[2])  # deterministic


# ------------------------------------------------------------------------------ off-step capture
def test_nothing_is_captured_on_steps_without_statistics(monkeypatch):
    calls = []
    real_gram = stats_module.linalg.gram
    monkeypatch.setattr(stats_module.linalg, "gram", lambda a: calls.append(a.shape) or real_gram(a))
    model = mlp()
    opt = IsoAdam(model, stat_interval=3, root_interval=3)
    seen = []
    for t, (x, y) in enumerate(batches(7), start=1):
        opt.zero_grad()
        before = len(calls)
        out = model(x)
        held = [x for cap in opt.statistics._captures.values() for xs in cap.pending.values() for x in xs]
        nn.functional.mse_loss(out, y).backward()
        stat_step = (t - 1) % 3 == 0
        sums = [opt.statistics.sums(n) for n in opt.statistics.modules]
        rows = [opt.statistics.rows(n) for n in opt.statistics.modules]
        seen.append((stat_step, len(calls) - before, all(h is None for h in held), sums, rows))
        opt.step()
    for stat_step, grams, nothing_held, sums, rows in seen:
        assert rows == [64, 64, 64]  # the row count is always kept (it scales the gradient)
        if stat_step:
            assert grams == 6 and all(s is not None for s in sums)
        else:
            assert grams == 0 and nothing_held and all(s is None for s in sums)
    assert [s[0] for s in seen] == [True, False, False, True, False, False, True]


def test_off_step_convolution_is_not_unfolded(monkeypatch):
    unfolds = []
    real = stats_module.conv_patches
    monkeypatch.setattr(stats_module, "conv_patches", lambda m, x: unfolds.append(1) or real(m, x))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 25, 4))
    opt = IsoAdam(model, stat_interval=2, root_interval=2)
    x, y = torch.randn(8, 2, 5, 5), torch.randn(8, 4)
    counts = []
    for _ in range(4):
        opt.zero_grad()
        n = len(unfolds)
        nn.functional.mse_loss(model(x), y).backward()
        counts.append((len(unfolds) - n, opt.statistics.rows("0")))
        opt.step()
    assert counts == [(1, 200), (0, 200), (1, 200), (0, 200)]


# ------------------------------------------------------------------------------ checkpoint
@pytest.mark.parametrize("cls", [Iso, IsoAdam])
def test_checkpoint_round_trip_with_subsampled_statistics(cls):
    data = batches(8, rows=64)
    kw = dict(stat_rows=24, stat_interval=2, root_interval=4)
    model = mlp()
    opt = cls(model, **kw)
    train(model, opt, data[:3])
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    assert all(g["stat_rows"] == 24 for g in saved_opt["param_groups"] if g["algorithm"] != "adam")
    train(model, opt, data[3:])

    resumed = mlp(seed=5)
    resumed.load_state_dict(saved_model)
    opt2 = cls(resumed, **{**kw, "stat_rows": None})  # the checkpoint's value wins
    opt2.load_state_dict(saved_opt)
    assert all(g["stat_rows"] == 24 for g in opt2.param_groups if g["algorithm"] != "adam")
    train(resumed, opt2, data[3:])
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), resumed.parameters()))


def test_old_checkpoint_without_stat_rows_loads_with_the_default():
    model = mlp()
    opt = IsoAdam(model, stat_interval=1)
    train(model, opt, batches(2))
    sd = opt.state_dict()
    for g in sd["param_groups"]:
        g.pop("stat_rows", None)
    opt2 = IsoAdam(mlp(), stat_interval=1)
    opt2.load_state_dict(sd)
    assert all(g["stat_rows"] == opt2.defaults["stat_rows"] for g in opt2.param_groups if g["algorithm"] != "adam")


# ------------------------------------------------------------------------------ the scripts
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_gpu_check_sh_says_so_and_exits_0_without_cuda(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no CUDA device" in proc.stdout
    usage = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_gpu_check_cpu_fallback_writes_the_documented_schema(tmp_path):
    gpu_check = _load(ROOT / "scripts" / "gpu_check.py")
    assert gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--quick", "--skip-tests", "--skip-cost"]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["errors"] == {}
    assert {"schema_version", "environment", "tests", "cost", "ch13_dtype_timings", "seconds"} <= set(report)
    t = report["ch13_dtype_timings"]
    assert {"device", "torch", "repeats", "matmul", "throughput_tflops", "eigh_root", "newton_root",
            "newton_schulz", "gram"} <= set(t)
    for row in t["matmul"]:
        assert set(row) == {"shape", "m", "k", "n", "dtype", "ms", "tflops"}
        assert row["shape"] in ("square", "forward") and row["dtype"] in ("float32", "tf32", "bfloat16")
        assert row["ms"] > 0 and row["tflops"] == pytest.approx(2 * row["m"] * row["k"] * row["n"] / row["ms"] / 1e9)
    assert {r["dtype"] for r in t["matmul"]} == {"float32", "bfloat16"}  # TF32 only on CUDA
    assert set(t["throughput_tflops"]) == {"float32", "bfloat16"}
    assert all(r["ms"] > 0 and r["iterations"] >= 1 for r in t["newton_root"])
    assert {r["dtype"] for r in t["newton_schulz"]} == {"float32", "bfloat16"}


def test_gpu_check_collects_only_the_files_with_gpu_tests():
    gpu_check = _load(ROOT / "scripts" / "gpu_check.py")
    files = gpu_check.gpu_test_files()
    assert "tests/lib/test_optim_behaviour.py" in files and "tests/lib/test_dropin.py" in files
    marker = "@pytest.mark." + "gpu"  # spelled in two pieces so that this file does not match
    assert all(marker in (ROOT / f).read_text() for f in files)
    assert "tests/lib/test_cost_options.py" not in files


def test_gpu_check_without_cuda_exits_0_with_the_message(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("checks the no-CUDA path")
    gpu_check = _load(ROOT / "scripts" / "gpu_check.py")
    assert gpu_check.main(["--out", str(tmp_path)]) == 0
    assert "no CUDA device" in capsys.readouterr().out


def test_bench_cost_quick_reports_ratios_targets_and_breakdown(tmp_path):
    bench = _load(ROOT / "benchmarks" / "bench_cost.py")
    out = tmp_path / "cost.json"
    res = bench.main(["--quick", "--models", "mlp", "--rounds", "2", "--block", "1", "--warmup", "1",
                      "--only", "IsoAdam", "--json", str(out)])
    saved = json.loads(out.read_text())
    assert saved["targets"] == res["targets"] and len(res["targets"]) == 1
    (mlp_res,) = res["results"]
    rows = {r["optimizer"]: r for r in mlp_res["rows"]}
    assert rows["AdamW"]["ratio"] == pytest.approx(1.0)
    assert rows[bench.TARGET_OPTIMIZER]["ratio"] > 0
    assert res["targets"][0]["passed"] == (rows[bench.TARGET_OPTIMIZER]["ratio"] <= bench.TARGETS["mlp"])
    assert set(mlp_res["breakdown"]) >= {"hooks", "statistics", "roots", "update"}


def test_bench_cost_amortizes_by_the_schedule():
    bench = _load(ROOT / "benchmarks" / "bench_cost.py")
    kind = lambda t: ("stats" if (t - 1) % 2 == 0 else "") + ("+roots" if (t - 1) % 4 == 0 else "")  # noqa: E731
    shares = bench.shares_of(4, kind)
    assert shares == {"stats+roots": 0.25, "": 0.5, "stats": 0.25}
    # one slow step of each kind: the cost is the share-weighted medians
    times = [10.0, 1.0, 3.0, 1.0, 10.0, 1.0, 3.0, 1.0, 1.0]
    kinds = [kind(t) for t in range(1, 9)] + [""]
    assert bench.amortized(times, kinds, shares) == pytest.approx(0.25 * 10 + 0.5 * 1 + 0.25 * 3)
    with pytest.raises(RuntimeError, match="whole period"):
        bench.amortized([1.0], [""], shares)
    assert bench.parse_variant("stat_interval=10,stat_rows=None,root_method=eigh") == dict(
        stat_interval=10, stat_rows=None, root_method="eigh")


def test_default_subsamples_only_batches_larger_than_stat_rows():
    for cls in (Iso, IsoAdam):
        assert cls(mlp()).defaults["stat_rows"] == "auto"
    for rows, used in ((2048, 1024), (1024, 1024), (300, 300)):
        model = mlp()
        opt = IsoAdam(model)
        x, y = torch.randn(rows, 16), torch.randn(rows, 16)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        assert [opt.statistics.rows(n) for n in ("0", "2", "4")] == [rows] * 3
        assert [opt.statistics.used_rows(n) for n in ("0", "2", "4")] == [used] * 3
        opt.step()


def test_bench_cost_arithmetic_floor_on_a_tiny_model():
    bench = _load(ROOT / "benchmarks" / "bench_cost.py")
    make, data, loss_fn = bench.mlp_problem(torch.device("cpu"), quick=True)  # 4 x Linear(32), 16 rows
    factory = lambda m: IsoAdam(m, lr=1e-3, stat_rows=8, stat_interval=2)  # noqa: E731
    shapes = bench.floor_shapes(factory, make, data, loss_fn)
    assert shapes == [(8, 32, 32, 2)] * 4  # min(b, stat_rows) rows, (n, m) of each whitened weight
    res = bench.run_model("mlp", torch.device("cpu"), rounds=2, block=1, warmup=1, extra=False, quick=True,
                          log=lambda *a, **k: None, only=["IsoAdam (default)"])
    floor = res["floor"]
    assert floor["ratio"] > 1 and floor["best_of"] > 1
    assert floor["gram_ms"] > 0 and floor["apply_ms"] > 0
    sched = bench.library_schedule()  # the library's defaults, whatever they are today
    rows = 16 if sched["stat_rows"] in (None, "auto") else min(16, sched["stat_rows"])  # "auto" >= 1024
    assert floor["shapes"] == [dict(rows=rows, n=32, m=32, stat_interval=sched["stat_interval"])] * 4
    assert all(r["optimizer"] != "arithmetic floor" for r in res["rows"])  # not a row of the table
    (check,) = bench.verdicts([res])
    assert check["floor"] == floor["ratio"] and "floor" in check["line"]


def test_auto_rows_keep_two_rows_per_dimension_of_a_wide_layer():
    """``stat_rows="auto"``: 1024 rows, or twice the wider side of a layer wider than 512."""
    model = nn.Sequential(nn.Linear(16, 700), nn.Tanh(), nn.Linear(700, 16))
    opt = IsoAdam(model)
    x, y = torch.randn(3000, 16), torch.randn(3000, 16)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    assert [opt.statistics.used_rows(n) for n in ("0", "2")] == [1400, 1400]
    opt.step()
    with pytest.raises(ValueError, match=r"stat_rows must be None \(use every row\), 'auto' or a positive int, got 'all'"):
        IsoAdam(model, stat_rows="all")

