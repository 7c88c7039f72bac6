"""The package isolab.linalg: every name the repository reaches through it resolves, and its
modules stay small enough to read."""

import re
from pathlib import Path

import pytest

from isolab import linalg

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("isolab", "tests", "scripts", "benchmarks") for p in (ROOT / d).rglob("*.py")]
SOURCES += sorted((ROOT / "book").glob("*.ipynb"))

# ``linalg.NAME`` not preceded by another attribute access (so not torch.linalg, np.linalg),
# ``isolab.linalg.NAME``, and the names of ``from isolab.linalg import ...`` / ``from .linalg import``.
ATTRIBUTE = re.compile(r"(?<![\w.])linalg\.(\w+)|isolab\.linalg\.(\w+)")
FROM_IMPORT_BLOCK = re.compile(r"from (?:isolab\.|\.+)linalg import \(([^)]*)\)")
FROM_IMPORT_LINE = re.compile(r"from (?:isolab\.|\.+)linalg import ([\w ,]+)")


def used_names():
    names = {}
    for path in SOURCES:
        if path.parent == ROOT / "isolab" / "linalg" or path == Path(__file__).resolve():
            continue
        text = path.read_text(encoding="utf-8")
        found = {a or b for a, b in ATTRIBUTE.findall(text)}
        for block in FROM_IMPORT_BLOCK.findall(text) + FROM_IMPORT_LINE.findall(text):
            block = re.sub(r"#[^\n]*", "", block)
            found |= {n.strip() for n in block.split(",") if n.strip()}
        for name in found:
            names.setdefault(name, path.relative_to(ROOT))
    return names


def test_the_scan_finds_the_names_it_must():
    names = used_names()
    # a public name, a private one reached as an attribute, one reached by an import list
    assert {"msign_newton_schulz", "_eigh_with_retry", "_inverse_root_absolute"} <= set(names)


@pytest.mark.parametrize("name", sorted(used_names()))
def test_every_name_used_in_the_repository_resolves(name):
    assert hasattr(linalg, name), f"isolab.linalg.{name} (used in {used_names()[name]}) does not resolve"


def test_all_lists_only_existing_names():
    assert all(hasattr(linalg, n) for n in linalg.__all__)


def test_modules_stay_readable():
    for path in (ROOT / "isolab" / "linalg").glob("*.py"):
        lines = path.read_text(encoding="utf-8").splitlines()
        assert len(lines) <= 500, f"{path.name} has {len(lines)} lines"
        assert max(map(len, lines)) <= 120, f"{path.name} has a line over 120 characters"
