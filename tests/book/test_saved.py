"""Saved results: found in the checkout, else fetched once; a clear error when neither works."""

import numpy as np
import pytest

from isolab.book.figures import saved


def test_the_checkout_copy_is_found_first():
    assert saved.saved_result("ch08_muon_controls.npz") == saved.LOCAL / "ch08_muon_controls.npz"


def test_a_missing_result_names_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(saved, "LOCAL", tmp_path / "results")
    monkeypatch.setenv("ISOLAB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match="results/nothing.npz is not in this checkout and downloading is off"):
        saved.saved_result("nothing.npz", download=False)
    (tmp_path / "cache").mkdir()
    np.savez(tmp_path / "cache" / "cached.npz", x=np.arange(3))
    assert saved.saved_result("cached.npz", download=False) == tmp_path / "cache" / "cached.npz"


def test_write_result_writes_what_compute_returns(tmp_path):
    out = saved.write_result("demo", "demo.npz", lambda: {"x": np.arange(4), "info": np.array(saved.machine_note())},
                             ["--out", str(tmp_path / "demo.npz")])
    with np.load(out) as f:
        assert f["x"].tolist() == [0, 1, 2, 3] and "torch" in str(f["info"])


def test_split_jitter_check_takes_the_seeds_after_the_flag():
    assert saved.split_jitter_check(["--out", "x.npz"]) == (None, ["--out", "x.npz"])
    assert saved.split_jitter_check(["--jitter-check", "1", "2", "--out", "x"]) == ([1, 2], ["--out", "x"])
    with pytest.raises(SystemExit, match="needs one or more jitter seeds"):
        saved.split_jitter_check(["--jitter-check", "--out", "x"])
