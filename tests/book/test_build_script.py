"""scripts/build_book.py: a change in isolab must re-execute the chapters."""

import importlib.util
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_build_module():
    spec = importlib.util.spec_from_file_location("build_book", ROOT / "scripts" / "build_book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fingerprint_follows_the_library_and_the_environment(tmp_path, monkeypatch):
    build = load_build_module()
    shutil.copytree(ROOT / "isolab", tmp_path / "isolab", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("requirements.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    monkeypatch.setattr(build, "ROOT", tmp_path)

    first = build.library_fingerprint()
    assert build.library_fingerprint() == first, "the fingerprint must be deterministic"

    module = tmp_path / "isolab" / "book" / "features.py"
    module.write_text(module.read_text() + "\n# a comment is a change too\n")
    second = build.library_fingerprint()
    assert second != first

    (tmp_path / "isolab" / "new_module.py").write_text("X = 1\n")
    third = build.library_fingerprint()
    assert third != second

    (tmp_path / "requirements.txt").write_text("numpy==1.0\n")
    assert build.library_fingerprint() != third


def test_a_changed_fingerprint_clears_the_execution_cache(tmp_path, monkeypatch):
    build = load_build_module()
    monkeypatch.setattr(build, "BUILD", tmp_path)
    monkeypatch.setattr(build, "CACHE", tmp_path / ".jupyter_cache")
    monkeypatch.setattr(build, "FINGERPRINT", tmp_path / ".isolab-fingerprint")
    (tmp_path / ".jupyter_cache").mkdir()
    (tmp_path / ".isolab-fingerprint").write_text("an older library")
    calls = []
    monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: calls.append(k["env"]) or type("R", (), {"returncode": 0})())
    assert build.main() == 0
    assert not (tmp_path / ".jupyter_cache").exists(), "stale execution cache survived a library change"
    assert calls[0]["ISOLAB_EXPLORABLE"] == "static"
    assert (tmp_path / ".isolab-fingerprint").read_text() == build.library_fingerprint()
