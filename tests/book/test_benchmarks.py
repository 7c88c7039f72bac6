"""The benchmark scripts' own arithmetic (their timings are printed, never asserted)."""

import importlib.util
import math
import pathlib

import pytest
import torch

from isolab.book.engine import DEFAULTS, OPTIMIZERS

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench_optimizers():
    return _load("bench_optimizers")


@pytest.fixture(scope="module")
def bench_engine():
    return _load("bench_engine")


def test_iso_floor_adds_up(bench_optimizers):
    shapes = [(12, 8), (8, 8)]  # (out, in) as nn.Linear.weight
    floor, parts = bench_optimizers.iso_floor(shapes, tokens=32, device=torch.device("cpu"), interval=10)
    assert set(parts) == {"stats", "roots", "apply"}
    assert all(v > 0 for v in parts.values())
    assert math.isclose(floor, sum(parts.values()), rel_tol=1e-12)


def test_linear_macs_match_the_formulas(bench_optimizers):
    model = torch.nn.Sequential(torch.nn.Linear(8, 12), torch.nn.Linear(12, 4))
    fb, stats, apply = bench_optimizers.linear_macs(model, tokens=5)
    assert fb == 3 * 5 * (8 * 12 + 12 * 4)
    assert stats == 5 * (8 * 8 + 12 * 12) + 5 * (12 * 12 + 4 * 4)
    assert apply == 8 * 12 * (8 + 12) + 12 * 4 * (12 + 4)


def test_engine_floor_counts_every_optimizer(bench_engine):
    # every optimizer the engine runs has a product count, and every one with roots a refresh rate
    assert set(bench_engine.RULE_PRODUCTS) == set(OPTIMIZERS)
    with_roots = {name for name, h in DEFAULTS.items() if "root_interval" in h}
    assert set(bench_engine.ROOTS_PER_LAYER_STEP) == with_roots == {"shampoo", "iso", "isoadam", "shampoo_graft", "kfac"}
    assert bench_engine.ROOTS_PER_LAYER_STEP["iso"] == 2 / DEFAULTS["iso"]["root_interval"]
    assert bench_engine.RULE_PRODUCTS["muon"] == 3 * DEFAULTS["muon"]["ns_steps"] == 15
