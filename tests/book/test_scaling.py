"""isolab.book.scaling: flop counts against torch's counter, the cost model against real
optimizer steps, the precision helpers against exact roots, data-parallel replicas."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from isolab import distributed, linalg, updates

from isolab.book import scaling
from isolab.optim import IsoAdam
from isolab.optim import LayerStatistics
from isolab.book.seeding import generator


@pytest.fixture(autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# ----------------------------------------------------------------------------- counting
def test_count_flops_matmul_is_two_flops_per_multiply_add():
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    c = scaling.count_flops(torch.mm, a, b)
    assert torch.equal(c.result, a @ b)
    assert c.total == 2 * 7 * 5 * 3
    assert c.by_op == {"mm": 2 * 7 * 5 * 3}


def test_count_flops_charges_textbook_counts_for_factorizations():
    n = 12
    A = torch.randn(n, n, dtype=torch.float64)
    C = A @ A.T + n * torch.eye(n, dtype=torch.float64)
    assert scaling.count_flops(torch.linalg.eigh, C).by_op == {"_linalg_eigh": round(scaling.EIGH_FLOPS * n**3)}
    batched = scaling.count_flops(torch.linalg.eigh, C.expand(3, n, n)).total
    assert batched == 3 * round(scaling.EIGH_FLOPS * n**3)
    L = torch.linalg.cholesky(C)
    assert scaling.count_flops(torch.linalg.cholesky_ex, C).total == round(n**3 / 3)
    assert scaling.count_flops(torch.cholesky_inverse, L).total == round(2 * n**3 / 3)


@pytest.mark.parametrize("n,m,b", [(6, 10, 9), (16, 16, 32), (20, 4, 3)])
@pytest.mark.parametrize("input_grad", [True, False])
def test_layer_flops_match_autograd_and_the_statistics_hooks(n, m, b, input_grad):
    torch.manual_seed(0)
    layer = nn.Linear(n, m, bias=False)
    x = torch.randn(b, n, requires_grad=input_grad)

    def fwd_bwd():
        layer(x).square().sum().backward()

    model = scaling.layer_flops(n, m, b, input_grad=input_grad)
    plain = scaling.count_flops(fwd_bwd).total
    assert plain == model["forward_backward"] == model["forward"] + model["backward"]
    with LayerStatistics(layer):
        hooked = scaling.count_flops(fwd_bwd).total
    assert hooked - plain == model["statistics"] == 2 * b * (n * n + m * m)
    if input_grad and n == m:
        assert model["statistics"] * 3 == model["forward_backward"] * 2  # the 2/3 of a square hidden layer


def test_measure_statistics_counts_and_times_one_layer():
    r = scaling.measure_statistics(12, 20, 7)
    model = scaling.layer_flops(12, 20, 7)
    assert r == {"forward_backward": model["forward_backward"], "statistics": model["statistics"]}
    first = scaling.measure_statistics(16, 16, 5, input_grad=False, repeats=2)
    assert first["statistics"] == first["forward_backward"]  # 4bn² against 4bn²: ratio 1
    assert first["forward_backward_s"] > 0 and set(first) >= {"statistics_s"}


def test_gram_flops_follow_the_statistics_hooks_on_a_cpu():
    for n, m, b in [(100, 40, 6), (129, 300, 5), (256, 256, 3)]:
        layer = nn.Linear(n, m, bias=False)
        x = torch.randn(b, n, requires_grad=True)
        with LayerStatistics(layer):
            hooked = scaling.count_flops(lambda: layer(x).sum().backward()).total
        plain = scaling.count_flops(lambda: layer(x).sum().backward()).total
        expected = scaling.gram_flops(b, n, scaling.GRAM_BLOCK) + scaling.gram_flops(b, m, scaling.GRAM_BLOCK)
        assert hooked - plain == expected
        assert scaling.layer_flops(n, m, b, gram_block=scaling.GRAM_BLOCK)["statistics"] == expected


def test_gram_flops_block_formula():
    assert scaling.gram_flops(7, 300) == 2 * 7 * 300**2
    assert scaling.gram_flops(7, 128, 64) == 2 * 7 * 128**2  # n <= 2B: one product
    assert scaling.gram_flops(5, 1024, 64) == 5 * 1024 * (1024 + 64)  # B divides n
    # brute force: one product per block row, A[:, i:i+B]ᵀ A[:, i:]
    n, B = 200, 64
    assert scaling.gram_flops(3, n, B) == sum(2 * 3 * len(range(i, min(i + B, n))) * (n - i) for i in range(0, n, B))


@pytest.mark.parametrize("n,m", [(9, 5), (6, 6)])
def test_root_apply_and_rebuild_costs_match_the_library_calls(n, m):
    gen = generator(0)
    grad = torch.randn(m, n, generator=gen, dtype=torch.float64)
    Cx = scaling.rotated_gaussian(4 * n, n, 10.0, generator=gen)
    Cx = Cx.T @ Cx / (4 * n)
    Cg = scaling.rotated_gaussian(4 * m, m, 10.0, generator=gen)
    Cg = Cg.T @ Cg / (4 * m)
    model = scaling.layer_flops(n, m, 1)
    Px, Pg = linalg.inverse_sqrt(Cx), linalg.inverse_sqrt(Cg)
    assert scaling.count_flops(updates.two_sided, grad, Pg, Px).total == model["apply"] == 2 * n * m * (n + m)
    roots = scaling.count_flops(linalg.inverse_sqrt, Cx).total + scaling.count_flops(linalg.inverse_sqrt, Cg).total
    assert roots == pytest.approx(model["roots_eigh"], abs=2)
    k = 7  # fixed-step Newton: 3 products per iteration, plus the final residual Z·Y
    newton = sum(scaling.count_flops(linalg.inverse_sqrt_newton, C, 1e-3, k).total for C in (Cx, Cg))
    assert newton == k * model["newton_iteration"] + 2 * (n**3 + m**3)
    rebuild = sum(scaling.count_flops(linalg.covariance_from_inverse_sqrt, P, 0.1).total for P in (Px, Pg))
    assert rebuild == pytest.approx(model["lean_rebuild"], abs=4)


def test_iso_step_flops_amortizes_and_counts_communication():
    n, m, b = 32, 48, 100
    c = scaling.layer_flops(n, m, b)
    every = scaling.iso_step_flops(n, m, b)
    assert every["statistics"] == c["statistics"] and every["roots"] == c["roots_eigh"]
    assert every["optimizer"] == c["statistics"] + c["roots_eigh"] + c["apply"]
    assert every["gradient_elements"] == 0 and every["statistics_elements"] == 0  # one process
    k = scaling.iso_step_flops(n, m, b, 4, 10, lean=True, world_size=8)
    assert k["statistics"] == c["statistics"] / 4
    assert k["roots"] == (c["roots_eigh"] + c["lean_rebuild"]) / 10
    assert k["apply"] == c["apply"]
    assert k["gradient_elements"] == n * m
    assert k["statistics_elements"] == (n * (n + 1) + m * (m + 1)) / 2 / 4
    assert k["roots_elements"] == (n * (n + 1) + m * (m + 1)) / 2 / 10
    newton = scaling.iso_step_flops(n, m, b, root_method="newton", newton_iterations=12)
    assert newton["roots"] == 12 * 6 * (n**3 + m**3)
    with pytest.raises(ValueError):
        scaling.iso_step_flops(n, m, b, 0)
    with pytest.raises(ValueError):
        scaling.iso_step_flops(n, m, b, root_method="svd")


@pytest.mark.parametrize("shape", [(12, 12), (8, 20), (20, 8)])
def test_muon_flops_match_newton_schulz(shape):
    M = torch.randn(*shape)
    assert scaling.count_flops(linalg.msign_newton_schulz, M).total == scaling.muon_flops(*shape)
    assert scaling.muon_flops(10, 10) == 30 * 10**3


# ---------------------------------------------------------------------- amortization
def test_train_mlp_counts_what_the_cost_model_predicts_and_lean_state_memory():
    width, depth, batch = 16, 3, 40
    shapes = [(width, width, False), (width, width, True), (width, 16, True)]
    for ks, kr in ((1, 1), (3, 3), (1, 3)):
        r = scaling.train_mlp(stat_interval=ks, root_interval=kr, steps=4, batch=batch, width=width, depth=depth)
        lean = ks == kr > 1
        model = sum(scaling.iso_step_flops(n, m, batch, ks, kr, lean=lean, input_grad=g, gram_block=scaling.GRAM_BLOCK)["optimizer"]
                    for n, m, g in shapes)
        fb = sum(scaling.layer_flops(n, m, batch, input_grad=g)["forward_backward"] for n, m, g in shapes)
        assert r["optimizer_flops"] == pytest.approx(model, rel=1e-12)
        assert r["forward_backward_flops"] == fb
        params = sum(n * m for n, m, _ in shapes)
        side = sum(n * n + m * m for n, m, _ in shapes)
        # Adam's two moments, plus: the covariances (roots every step: nothing to keep), the
        # roots only (lean state), or both (statistics every step, roots every 3)
        assert r["state_elements"] == 2 * params + (2 * side if (ks, kr) == (1, 3) else side)
        assert len(r["loss"]) == 4 and all(math.isfinite(v) for v in r["loss"])
    adam = scaling.train_mlp("adam", steps=4, batch=batch, width=width, depth=depth)
    assert adam["optimizer_flops"] == 0  # elementwise work is not counted
    with pytest.raises(ValueError):
        scaling.train_mlp("sgd", steps=1)


def test_train_mlp_is_reproducible_and_the_intervals_change_the_run():
    a = scaling.train_mlp(stat_interval=1, root_interval=1, steps=8, batch=32, width=16)
    b = scaling.train_mlp(stat_interval=1, root_interval=1, steps=8, batch=32, width=16)
    c = scaling.train_mlp(stat_interval=4, root_interval=4, steps=8, batch=32, width=16)
    assert a["loss"] == b["loss"] and a["eval_loss"] == b["eval_loss"]
    assert a["loss"][0] == c["loss"][0]  # same weights, same first batch
    assert a["loss"][-1] != c["loss"][-1]


def test_state_elements_counts_tensors_only():
    p = nn.Parameter(torch.zeros(3, 4))
    opt = torch.optim.Adam([p])
    p.grad = torch.ones(3, 4)
    opt.step()
    assert scaling.state_elements(opt) == 2 * 12 + 1  # exp_avg, exp_avg_sq, step (a 0-d tensor)


# ------------------------------------------------------------------------- precision
def test_rotated_gaussian_has_the_requested_covariance():
    gen = generator(3)
    X = scaling.rotated_gaussian(200_000, 6, 50.0, generator=gen)
    w = torch.linalg.eigvalsh(X.T @ X / X.shape[0])
    from isolab.book.features import spectrum

    assert torch.allclose(w, spectrum(6, 50.0).flip(0), rtol=0.05)
    assert X.dtype == torch.float64
    assert scaling.rotated_gaussian(4, 3, generator=generator(0), dtype=torch.float32).dtype == torch.float32
    # rotated: the covariance is far from diagonal
    C = X.T @ X / X.shape[0]
    assert (C - torch.diag(torch.diagonal(C))).abs().max() > 0.3


def test_whitening_residual_is_zero_for_the_exact_root_and_measures_scale_errors():
    gen = generator(4)
    X = scaling.rotated_gaussian(64, 8, 100.0, generator=gen)
    C = X.T @ X / 64
    assert scaling.whitening_residual(linalg.inverse_sqrt(C), C) < 1e-10
    assert scaling.whitening_residual(linalg.inverse_sqrt(C, damping=0.01), C, damping=0.01) < 1e-10
    assert scaling.whitening_residual(0.9 * linalg.inverse_sqrt(C), C) == pytest.approx(1 - 0.81, rel=1e-9)
    assert scaling.whitening_residual(linalg.inverse_sqrt(C), C, damping=0.01) > 1e-3  # wrong target


def test_newton_in_float64_is_the_library_iteration_and_bfloat16_stalls():
    gen = generator(5)
    X = scaling.rotated_gaussian(256, 32, 10.0, generator=gen)
    C = X.T @ X / 256
    mine = scaling.newton_inverse_sqrt_in(C, 6, torch.float64, damping=1e-3)
    lib = linalg.inverse_sqrt_newton(C, damping=1e-3, steps=6).to(torch.float32)
    assert torch.allclose(mine, lib, rtol=1e-5, atol=1e-6)
    f32 = scaling.newton_inverse_sqrt_in(C, 20, torch.float32, damping=1e-3)
    bf16 = scaling.newton_inverse_sqrt_in(C, 20, torch.bfloat16, damping=1e-3)
    assert scaling.whitening_residual(f32, C, 1e-3) < 1e-4
    assert scaling.whitening_residual(bf16, C, 1e-3) > 1e-3
    assert f32.dtype == bf16.dtype == torch.float32
    with pytest.raises(ValueError):
        scaling.newton_inverse_sqrt_in(C, -1, torch.float32)


# ---------------------------------------------------------------------------- timing
def test_timing_helpers_return_positive_times():
    assert scaling.median_time(lambda: sum(range(100)), repeats=3) > 0
    calls = []
    assert scaling.median_time(lambda: calls.append(1), repeats=4, warmup=2, best=True) >= 0
    assert len(calls) == 6
    report = scaling.linalg_benchmark((8, 16), device="cpu", repeats=1)
    assert [r["n"] for r in report["rows"]] == [8, 16]
    for row in report["rows"]:
        for key in ("matmul", "eigh_root", "newton_root", "ns5_float32", "ns5_bfloat16"):
            assert row[key] > 0
        assert row["newton_iterations"] >= 1
    with pytest.raises(ValueError):
        scaling.median_time(lambda: None, repeats=0)


# ----------------------------------------------------------------- data parallelism
def test_replicas_with_averaged_statistics_match_full_batch_and_local_ones_drift():
    kwargs = dict(steps=12, global_batch=64, width=16, checkpoints=(1, 12), root_interval=3)
    reference = scaling.train_replica(**kwargs)
    assert all(v == 0 for v in reference["communication"].values())
    runs = {"synced": {}, "local": {"sync_statistics": False}}
    r0, r1 = distributed.launch(scaling.data_parallel_worker, 2, runs, kwargs, timeout=120)
    synced, local = (r0["synced"], r1["synced"]), (r0["local"], r1["local"])
    assert scaling.max_gap(synced[0]["params"], synced[1]["params"]) == 0.0
    assert scaling.max_gap(synced[0]["params"], reference["params"]) < 1e-5
    assert scaling.max_gap(local[0]["params"], local[1]["params"]) > 1e-3
    assert scaling.max_gap(local[0]["snapshots"][1], local[1]["snapshots"][1]) > 0  # apart after one step
    # communication per process: gradients every step; packed statistics every step; roots on refresh
    params = 16 * 16 * 2 + 16 * 16
    packed = sum(n * (n + 1) // 2 + m * (m + 1) // 2 for n, m in [(16, 16), (16, 16), (16, 16)])
    com = synced[0]["communication"]
    assert com["gradients"] == 12 * params
    assert com["statistics"] == 12 * packed
    assert synced[0]["calls"]["roots"] == 4  # refreshes at steps 1, 4, 7, 10
    assert local[0]["communication"]["statistics"] == 0 and local[0]["communication"]["gradients"] == 12 * params


def test_regression_task_float64_samples_come_from_the_same_draws():
    a, b = scaling.RegressionTask(16, 4, 100.0, seed=3), scaling.RegressionTask(16, 4, 100.0, seed=3)
    x32, y32 = a.batch(64)
    x64, y64 = b.batch(64, torch.float64)
    assert x32.dtype == torch.float32 and x64.dtype == torch.float64
    assert torch.allclose(x64.float(), x32, rtol=1e-5, atol=1e-6) and not torch.equal(x64, x32.double())
    assert torch.allclose(y64.float(), y32, rtol=1e-5, atol=1e-5)
    ex, ey = a.eval_set(torch.float64)
    assert ex.shape == (2048, 16) and torch.allclose(ex.float(), a.eval_x, rtol=1e-5, atol=1e-6)


def test_train_mlp_in_float64():
    run = scaling.train_mlp("isoadam", steps=3, batch=32, width=8, dtype=torch.float64, stats_dtype=torch.float64)
    assert all(math.isfinite(v) for v in run["loss"]) and math.isfinite(run["eval_loss"])
    with pytest.raises(ValueError, match="dtype"):
        scaling.train_mlp("adam", steps=1, batch=8, width=8, dtype=torch.float16)


# ------------------------------------------------------------- precision and ranks
def test_time_weights_are_the_ratio_of_peak_rates():
    w = scaling.time_weights()
    assert w["forward_backward"] == 1.0 and w["newton_schulz"] == 1.0
    assert w["statistics"] == pytest.approx(989.4 / 67.0)
    tf32 = scaling.time_weights(precision={"statistics": "tf32"})
    assert tf32["statistics"] == pytest.approx(989.4 / 494.7) and tf32["apply"] == w["apply"]
    assert scaling.time_weights({"float32": 1.0, "tf32": 1.0, "bfloat16": 1.0})["statistics"] == 1.0


def test_time_weights_name_bad_input():
    with pytest.raises(ValueError, match="'fp8'"):
        scaling.time_weights(precision={"statistics": "fp8"})
    with pytest.raises(ValueError, match="unknown parts"):
        scaling.time_weights(precision={"optimizer": "float32"})
    with pytest.raises(ValueError, match="positive"):
        scaling.time_weights({"float32": 0.0, "tf32": 1.0, "bfloat16": 1.0})


@pytest.mark.parametrize("jobs, world, share", [(24, 1, 1.0), (24, 8, 3 / 24), (12, 8, 2 / 12), (12, 24, 1 / 12), (5, 2, 3 / 5)])
def test_rank_share_is_the_busiest_ranks_fraction(jobs, world, share):
    assert scaling.rank_share(jobs, world) == pytest.approx(share)


def test_rank_share_names_bad_input():
    with pytest.raises(ValueError, match="world_size"):
        scaling.rank_share(4, 0)


def test_model_step_spreads_roots_and_newton_schulz_and_weights_by_precision():
    one, eight = scaling.model_step(1024, 2048, 10, 1), scaling.model_step(1024, 2048, 10, 8)
    flops = scaling.iso_step_flops(1024, 1024, 2048, 10, 10)
    assert one["Iso, eigh"]["roots"] == pytest.approx(flops["roots"] / flops["forward_backward"])
    assert eight["Iso, eigh"]["roots"] == pytest.approx(one["Iso, eigh"]["roots"] * 3 / 24)
    assert eight["Muon"]["Newton-Schulz"] == pytest.approx(one["Muon"]["Newton-Schulz"] * 2 / 12)
    assert eight["Iso, eigh"]["statistics"] == one["Iso, eigh"]["statistics"]
    timed = scaling.model_step(1024, 2048, 10, 8, time_weighted=True)
    w = scaling.time_weights()
    assert timed["Iso, eigh"]["apply roots"] == pytest.approx(eight["Iso, eigh"]["apply roots"] * w["apply"])
    assert timed["Muon"]["Newton-Schulz"] == pytest.approx(eight["Muon"]["Newton-Schulz"])


def test_saved_gpu_timings_reads_the_key_or_says_none(tmp_path):
    assert scaling.saved_gpu_timings(tmp_path / "absent.json") is None
    f = tmp_path / "gpu_check.json"
    f.write_text('{"schema_version": 1}')
    assert scaling.saved_gpu_timings(f) is None
    rates = {"float32": 50.0, "tf32": 300.0, "bfloat16": 700.0}
    f.write_text(json.dumps({"ch13_dtype_timings": {"device": "x", "throughput_tflops": rates}}))
    got = scaling.saved_gpu_timings(f)
    assert scaling.time_weights(got["throughput_tflops"])["statistics"] == pytest.approx(14.0)
    f.write_text(json.dumps({"ch13_dtype_timings": {"device": "x"}}))
    with pytest.raises(ValueError, match="throughput_tflops"):
        scaling.saved_gpu_timings(f)


def test_staleness_run_names_bad_lanes_and_settings():
    with pytest.raises(ValueError, match="'isoadam_10'"):
        scaling.staleness_run("isoadam_10", 1e-3, 0)
    with pytest.raises(ValueError, match="'momentum'"):
        scaling.staleness_run("isoadam_1_1", 1e-3, 0, momentum=0.9)


def test_schedule_cost_matches_train_mlp_and_the_model():
    kw = dict(stat_interval=3, root_interval=3, steps=6, width=16, dtype=torch.float64, stats_dtype=torch.float64)
    trained = scaling.train_mlp(**kw)
    cost = scaling.schedule_cost(**{k: v for k, v in kw.items() if k != "steps"})
    assert cost["optimizer_flops"] == trained["optimizer_flops"]
    assert cost["state_elements"] == trained["state_elements"]
    assert scaling.train_mlp(flops=False, **kw)["optimizer_flops"] is None


def test_train_ddp_script_under_torchrun_keeps_replicas_identical():
    """The chapter's `torchrun` command (section 13.6), shortened: two gloo processes,
    statistics averaged; the replicas must end bitwise identical."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "train_ddp.py"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), "--steps", "12"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "statistics averaged" in done.stdout
    assert "largest parameter difference between replicas: 0\n" in done.stdout + "\n"


def test_the_first_root_amplifies_most_at_as_many_rows_as_dimensions():
    """Section 13.4's explanation of the subsample result: the first inverse root's largest
    gain peaks at N = d (Marchenko-Pastur's smallest eigenvalue near 0, the shrinkage off),
    is bounded by the shrinkage below d, and falls above it."""
    from isolab.book import scaling

    gain = {n: scaling.first_root_gain(n, d=32, draws=10) for n in (8, 16, 32, 64, 128)}
    assert max(gain, key=gain.get) == 32 and gain[32] > 10
    assert max(gain[8], gain[16]) < 1.5 and gain[64] < gain[32] / 3 and gain[128] < gain[64]
    assert scaling.first_root_gain(16, d=32, shrinkage=False, draws=4) > 10, "without shrinkage a small batch is worse"


def test_model_step_moves_parts_to_another_precision():
    """TF32 statistics and application: those parts' modelled time falls by 494.7/67, the
    roots and Newton-Schulz keep theirs, the flop count does not change."""
    f32 = scaling.model_step(4096, 16384, 10, 8, time_weighted=True)
    tf32 = scaling.model_step(4096, 16384, 10, 8, time_weighted=True,
                              precision={"statistics": "tf32", "apply": "tf32"})
    iso, iso_t = f32["Iso, eigh"], tf32["Iso, eigh"]
    for part in ("statistics", "apply roots"):
        assert iso[part] / iso_t[part] == pytest.approx(scaling.H100_TFLOPS["tf32"] / scaling.H100_TFLOPS["float32"])
    assert iso["roots"] == iso_t["roots"] and f32["Muon"] == tf32["Muon"]
    assert scaling.model_step(4096, 16384, 10, 8) == scaling.model_step(
        4096, 16384, 10, 8, precision={"statistics": "tf32"})
