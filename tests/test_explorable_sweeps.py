"""results/sweeps_explorable.npz: Chapter 10's explorable draws from it, so it must be what
scripts/explorable_sweeps.py computes."""

from __future__ import annotations

import numpy as np
import pytest
from scripts_loader import load_script

from isolab.book.results import edge_of_divergence

script = load_script("explorable_sweeps")


@pytest.fixture(scope="module")
def saved():
    return script.load()


def test_the_saved_grid_is_the_scripts_grid(saved):
    meta = saved["meta"]
    assert meta["depths"] == list(script.DEPTHS) and meta["batches"] == list(script.BATCHES)
    assert list(meta["sigmas"]) == list(script.SIGMAS) and meta["optimizers"] == list(script.LR_GRIDS)
    assert meta["problem"]["steps"] == script.STEPS and meta["command"] == "python scripts/explorable_sweeps.py"
    assert saved["relative"].shape == (3, 3, 5, 4, 10)
    finite = np.isfinite(saved["relative"])
    assert finite.mean() > 0.5 and (~finite).any(), "a sweep grid should both converge and diverge somewhere"


@pytest.mark.parametrize("name, depth, batch, sigma", [("iso", 2, 16, "κ 1000 rotated"), ("sgd", 8, 256, "I")])
def test_a_setting_retrained_equals_the_saved_one(saved, name, depth, batch, sigma):
    live = script.relative_final_loss(script.one_setting(name, depth, batch, sigma))
    index = (script.DEPTHS.index(depth), script.BATCHES.index(batch), list(script.SIGMAS).index(sigma),
             list(script.LR_GRIDS).index(name))
    kept = saved["relative"][index][: live.size]
    finite = np.isfinite(kept)
    assert np.array_equal(np.isfinite(live), finite), "a different set of lanes diverged"
    steady = finite & ~edge_of_divergence(~finite)   # the last stable rate is chaotic: its outcome only
    np.testing.assert_allclose(live[steady], kept[steady], rtol=1e-2)  # float32: last digits depend on the CPU


def test_save_and_load_round_trip(tmp_path):
    data = {"relative": np.arange(6.0).reshape(1, 2, 3), "meta": {"command": "x", "depths": [1]}}
    out = script.load(script.save(data, tmp_path / "s.npz"))
    assert np.array_equal(out["relative"], data["relative"]) and out["meta"] == data["meta"]
