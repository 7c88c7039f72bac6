"""Build the book: execute every chapter and render the HTML site into _build/html.

Run through ``make book``, which first sets up the pinned environment in ``.venv``.

* Fails on any error in a chapter's cell and on any Sphinx warning (``-W``).
* Chapter outputs are cached by Jupyter Book, keyed on each notebook's code cells only.
  A change in the ``isolab`` library, in the saved ``results/`` the chapters load, in the
  script Chapter 13 runs, or in the pinned environment would therefore leave stale
  outputs; this script fingerprints them and clears the cache when the fingerprint
  changes, so every chapter runs again (``scripts/check_outputs.py`` compares the cached
  outputs with the committed ones).
* Sets ``ISOLAB_EXPLORABLE=static`` so explorable figures precompute their frames for
  the kernel-free website (see ``isolab/book/explorable.py``).
* ``--only ch01 [--only ch04 ...]`` builds a subset: the front page and the named pages
  (a table of contents written to ``_build/_toc_subset.yml``), into the same
  ``_build/html`` and with the same execution cache. Links to pages outside the subset
  cannot resolve, so a subset build does not turn warnings into errors; only the full
  build (no ``--only``) is the one that must pass ``-W``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
CACHE = BUILD / ".jupyter_cache"
FINGERPRINT = BUILD / ".isolab-fingerprint"


def library_fingerprint() -> str:
    """Hash of everything a chapter's execution depends on besides its own code."""
    digest = hashlib.sha256()
    # the library, the saved results chapters load, the script a chapter runs, the environment
    files = (sorted((ROOT / "isolab").rglob("*.py")) + sorted(p for p in (ROOT / "results").glob("*") if p.is_file())
             + [p for p in [ROOT / "scripts" / "train_ddp.py"] if p.exists()]
             + [ROOT / "requirements.txt", ROOT / "pyproject.toml"])
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def subset_toc(names: list[str]) -> Path:
    """A table of contents with the front page, the pages whose file name starts with one
    of ``names`` (``ch01``, ``ch04_muon``, ``using_isolab``) in the book's order, and the
    bibliography (so that citations resolve)."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    chosen = [entry for part in toc.get("parts", []) for entry in part["chapters"]
              if any(Path(entry["file"]).name.startswith(name) for name in names)]
    unknown = [n for n in names if not any(Path(e["file"]).name.startswith(n) for e in chosen)]
    if unknown:
        raise SystemExit(f"--only names no page of _toc.yml: {unknown}")
    chosen += [entry for part in toc.get("parts", []) for entry in part["chapters"]
               if Path(entry["file"]).name == "bibliography" and entry not in chosen]   # citations resolve
    subset = {"format": toc["format"], "root": toc["root"], "parts": [{"caption": "Subset", "chapters": chosen}]}
    path = BUILD / "_toc_subset.yml"
    BUILD.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(subset, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Execute the chapters and render the site into _build/html.")
    parser.add_argument("--only", action="append", default=[], metavar="PAGE",
                        help="build only the front page and this page (a file-name prefix: ch01, using_isolab); repeatable")
    args = parser.parse_args([] if argv is None else argv)
    start = time.perf_counter()
    fingerprint = library_fingerprint()
    if CACHE.exists() and (not FINGERPRINT.exists() or FINGERPRINT.read_text() != fingerprint):
        print("isolab or the environment changed since the last build: clearing the execution cache")
        shutil.rmtree(CACHE)
    BUILD.mkdir(exist_ok=True)
    # Render every page afresh (stale pages of removed files must not survive); the
    # expensive part, executing the chapters, stays cached in CACHE.
    for stale in (BUILD / "html", BUILD / ".doctrees"):
        shutil.rmtree(stale, ignore_errors=True)
    env = dict(os.environ, ISOLAB_EXPLORABLE="static", PYDEVD_DISABLE_FILE_VALIDATION="1")
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    command = [str(jupyter_book), "build", str(ROOT), "--builder", "html"]
    command += ["--toc", str(subset_toc(args.only))] if args.only else ["-W", "--keep-going"]
    result = subprocess.run(command, cwd=ROOT, env=env)
    if result.returncode != 0:
        print("\nBook build FAILED (a cell error or a Sphinx warning; see above).", file=sys.stderr)
        return result.returncode
    FINGERPRINT.write_text(fingerprint)
    print(f"\nBook built in {time.perf_counter() - start:.0f} s. Open {BUILD / 'html' / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
